//! Reachability: everything a ref reaches, directly or through manifests.
//! GC keeps what is marked; verify reports what is marked but absent.

use std::collections::{BTreeSet, HashSet};

use crate::base::manifest::{looks_like_manifest, unknown_version, Manifest};
use crate::error::{Error, Result};
use crate::hash::{hash_bytes, Digest};
use crate::store::refs::{read_ref, walk_refs};
use crate::store::Store;

/// How marking treats a manifest it cannot trust.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strictness {
    /// Fail: GC must not sweep when it cannot know what a manifest holds.
    Fail,
    /// Record it and carry on: verify reports everything it finds.
    Record,
}

/// The result of marking.
#[derive(Default)]
pub(crate) struct Marked {
    /// Every digest reached (present or not).
    pub reached: HashSet<Digest>,
    /// Reached digests whose object is absent.
    pub missing: BTreeSet<Digest>,
    /// Manifests whose bytes do not hash to their name, and anything but a
    /// regular file at a reached object's path.
    pub corrupt: BTreeSet<Digest>,
    /// Manifests of a version this build cannot read.
    pub unknown: BTreeSet<Digest>,
    /// Every digest reached, in the order first reached: depth-first, children
    /// in manifest order, so one entry's objects come out together (export
    /// lays bundles out in this order, which keeps an entry's blobs adjacent).
    pub order: Vec<Digest>,
}

impl Store {
    /// The digests that refs point at.
    pub(crate) fn ref_targets(&self) -> Result<Vec<Digest>> {
        let mut targets = Vec::new();
        let mut bad = None;
        walk_refs(&self.dirs.refs, "", &mut |name, dir, leaf| {
            match read_ref(dir, leaf) {
                Ok(Some(d)) => targets.push(d),
                // Vanished between listing and reading: deleted concurrently.
                Ok(None) => {}
                Err(e) => {
                    bad.get_or_insert((name.to_owned(), e));
                }
            }
        })?;
        match bad {
            // An unreadable ref is an unknown root: GC must not guess.
            Some((name, Error::Io { path, source })) => Err(Error::Io {
                path,
                source: std::io::Error::new(source.kind(), format!("ref {name:?}: {source}")),
            }),
            Some((name, _)) => Err(Error::Format(format!("ref {name:?} is malformed"))),
            None => Ok(targets),
        }
    }

    /// Marks what `young` (unreferenced objects within the grace period)
    /// reach, adding to `marked`, for GC and eviction to keep.
    ///
    /// No ref reaches what this finds damaged, so damage here is garbage,
    /// not a reason to stop: a manifest that does not hash to its name, or
    /// anything but a regular file, is left unmarked and swept (one damaged
    /// stray object must not stop GC, and with it the size cap, for good).
    /// A manifest of a version this build cannot read still stops: its
    /// children are unknown and may be about to be referenced.
    pub(crate) fn mark_young(&self, young: Vec<Digest>, marked: &mut Marked) -> Result<()> {
        self.mark(young, Strictness::Record, marked)?;
        if let Some(digest) = marked.unknown.first() {
            return Err(Error::Format(format!(
                "manifest {digest} has a version this build cannot read; refusing to \
                 sweep what it may reach"
            )));
        }
        for digest in std::mem::take(&mut marked.corrupt) {
            marked.reached.remove(&digest);
        }
        Ok(())
    }

    /// Marks everything reachable from `roots`, adding to `marked`.
    ///
    /// Iterative (a visited set and an explicit stack), so deep or cyclic
    /// manifest graphs cannot overflow the stack or loop. Manifests are
    /// verified before their children are trusted; a blob that merely starts
    /// with the manifest magic but hashes correctly and does not parse is
    /// user data, a leaf.
    ///
    /// With [`Strictness::Fail`] (GC, export) marking fails closed: a
    /// manifest whose first bytes are damaged no longer looks like one, and
    /// its size proves nothing (`put` stores manifest bytes of any size, and
    /// bundles and remotes carry them), so every reached object is hashed
    /// before it counts as a leaf (objects this handle already verified are
    /// not hashed again); one that does not hash to its name stops the walk
    /// before anything is removed. A
    /// manifest of a version this build cannot read stops the walk: its
    /// children are unknown, so nothing may be swept. Anything but a regular
    /// file at a reached path stops it too.
    pub(crate) fn mark(
        &self,
        roots: impl IntoIterator<Item = Digest>,
        strictness: Strictness,
        marked: &mut Marked,
    ) -> Result<()> {
        let mut stack: Vec<Digest> = roots.into_iter().collect();
        stack.reverse();
        while let Some(digest) = stack.pop() {
            if !marked.reached.insert(digest) {
                continue;
            }
            marked.order.push(digest);
            let (blob, known_good, meta) = match self.map_object_known(&digest) {
                Ok(found) => found,
                Err(Error::Missing { .. }) => {
                    marked.missing.insert(digest);
                    continue;
                }
                Err(Error::Corrupt { .. }) if strictness == Strictness::Record => {
                    marked.corrupt.insert(digest);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let manifest_like = looks_like_manifest(&blob);
            let must_hash = manifest_like || (strictness == Strictness::Fail && !known_good);
            if must_hash && !known_good {
                if hash_bytes(&blob) != digest {
                    match strictness {
                        Strictness::Fail => return Err(Error::Corrupt { digest }),
                        Strictness::Record => {
                            marked.corrupt.insert(digest);
                            continue;
                        }
                    }
                }
                // The next GC or eviction of this handle need not hash it again.
                if let Some(meta) = &meta {
                    self.verified.record(&digest, meta);
                }
            }
            if !manifest_like {
                continue;
            }
            match Manifest::decode(&blob) {
                Some(Ok(manifest)) => {
                    // Reversed so that the first child is popped, and ordered, first.
                    stack.extend(manifest.children.into_iter().rev());
                }
                _ => {
                    if let Some(version) = unknown_version(&blob) {
                        match strictness {
                            Strictness::Fail => {
                                return Err(Error::Format(format!(
                                    "manifest {digest} has version {version}, which this build \
                                     cannot read; refusing to sweep what it may reach"
                                )))
                            }
                            Strictness::Record => {
                                marked.unknown.insert(digest);
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
