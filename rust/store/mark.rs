//! Reachability: everything a ref reaches, directly or through manifests.
//! GC keeps what is marked; verify reports what is marked but absent.

use std::collections::{BTreeSet, HashSet};

use crate::error::{Error, Result};
use crate::hash::{hash_bytes, Digest};
use crate::store::manifest::{looks_like_manifest, Manifest};
use crate::store::refs::{decode_ref, walk_refs};
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
    /// Manifests whose bytes do not hash to their name.
    pub corrupt: BTreeSet<Digest>,
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
        walk_refs(&self.layout.refs_dir(), "", &mut |name, path| {
            match std::fs::read_to_string(path)
                .ok()
                .as_deref()
                .and_then(decode_ref)
            {
                Some(d) => targets.push(d),
                // Vanished between listing and reading: deleted concurrently.
                None if !path.exists() => {}
                None => bad = Some(name.to_owned()),
            }
        })?;
        match bad {
            // An unreadable ref is an unknown root: GC must not guess.
            Some(name) => Err(Error::Format(format!("ref {name:?} is malformed"))),
            None => Ok(targets),
        }
    }

    /// Marks everything reachable from `roots`, adding to `marked`.
    ///
    /// Iterative (a visited set and an explicit stack), so deep or cyclic
    /// manifest graphs cannot overflow the stack or loop. Manifests are
    /// verified before their children are trusted; a blob that merely starts
    /// with the manifest magic but hashes correctly and does not parse is
    /// user data, a leaf. (A manifest whose magic bytes themselves are
    /// damaged reads as a leaf too; `verify` finds it.)
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
            let blob = match self.map_object(&digest) {
                Ok(blob) => blob,
                Err(Error::Missing { .. }) => {
                    marked.missing.insert(digest);
                    continue;
                }
                Err(e) => return Err(e),
            };
            if !looks_like_manifest(&blob) {
                continue;
            }
            if hash_bytes(&blob) != digest {
                match strictness {
                    Strictness::Fail => return Err(Error::Corrupt { digest }),
                    Strictness::Record => {
                        marked.corrupt.insert(digest);
                        continue;
                    }
                }
            }
            if let Some(Ok(manifest)) = Manifest::decode(&blob) {
                // Reversed so that the first child is popped, and ordered, first.
                stack.extend(manifest.children.into_iter().rev());
            }
        }
        Ok(())
    }
}
