//! Import: unpacks a bundle into a store, deduplicating against what the store already holds.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use rayon::prelude::*;

use crate::base::manifest::{looks_like_manifest, Manifest};
use crate::base::{Existing, Expect};
use crate::bundle::{Bundle, TrustedKeys};
use crate::error::{Error, Result};
use crate::hash::{hash_bytes, Digest};
use crate::lock::LockMode;
use crate::progress::Progress;
use crate::store::mark::{Marked, Strictness};
use crate::store::Store;

/// What [`Store::import_bundle`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Blobs written to the store.
    pub objects_new: u64,
    /// Blobs the store already held (nothing written, nothing hashed).
    pub objects_present: u64,
    /// Bytes written to the store.
    pub bytes_new: u64,
    /// Refs of the bundle that now point where the bundle says.
    pub refs: u64,
    /// Of those, refs that were created or repointed (the rest already matched).
    pub refs_changed: u64,
    /// Blobs the store held damaged (wrong content, a symlink, a directory)
    /// and the import replaced.
    pub objects_repaired: u64,
}

enum Outcome {
    New(u64),
    Repaired(u64),
    Present,
    Corrupt(Digest),
}

/// Orders the bundle's manifests so that each comes after every manifest it
/// lists (a depth-first postorder; the visited set guards against cycles).
fn children_first(bundle: &Bundle, manifests: Vec<[u8; 32]>) -> Vec<[u8; 32]> {
    let wanted: HashSet<[u8; 32]> = manifests.iter().copied().collect();
    let kids = |raw: &[u8; 32]| -> Vec<[u8; 32]> {
        match bundle.get(raw).and_then(Manifest::decode) {
            Some(Ok(m)) => (m.children.iter())
                .map(|c| *c.as_bytes())
                .filter(|c| wanted.contains(c))
                .collect(),
            _ => Vec::new(),
        }
    };
    let mut visited = HashSet::new();
    let mut order = Vec::with_capacity(manifests.len());
    for start in manifests {
        if !visited.insert(start) {
            continue;
        }
        let mut stack = vec![(start, kids(&start), 0usize)];
        while let Some((node, children, next)) = stack.pop() {
            if let Some(&kid) = children.get(next) {
                stack.push((node, children, next + 1));
                if visited.insert(kid) {
                    let grandkids = kids(&kid);
                    stack.push((kid, grandkids, 0));
                }
            } else {
                order.push(node);
            }
        }
    }
    order
}

fn digest_of(raw: &[u8; 32]) -> Digest {
    blake3::Hash::from_bytes(*raw).into()
}

impl Store {
    /// Unpacks the bundle at `path` into the store: every blob the store
    /// lacks is verified against its digest and written through the normal
    /// crash-safe put path (in parallel), then the bundle's refs are set.
    ///
    /// Idempotent: blobs already stored are neither hashed nor written, and
    /// refs that already match are left alone (their use time included).
    ///
    /// A ref is set only once everything it reaches is in the store. A
    /// bundle blob that does not hash to its name is not written, so no ref
    /// that reaches it is set, and the call fails with `Error::Corrupt` after
    /// importing everything else; a ref whose closure the bundle does not
    /// hold is skipped the same way with `Error::Missing`. A malformed bundle
    /// is `Error::Format` before anything is written. A blob the store holds
    /// damaged is replaced by the bundle's sound copy.
    ///
    /// A ref that cannot be set where the bundle puts it (its name is a
    /// namespace of other refs here, or a prefix of it is a ref) does not
    /// stop the others: every ref that can be set is, then the call fails
    /// with `Error::RefConflicts` naming each one that could not.
    pub fn import_bundle(&self, path: &Path) -> Result<ImportReport> {
        self.import_bundle_with(path, None, &Progress::new())
    }

    /// [`import_bundle`](Self::import_bundle), refusing a bundle that
    /// `trust` does not accept (`Error::Untrusted`, before anything is
    /// written), and counting processed bytes into `progress`; once it is
    /// cancelled the call fails with `Interrupted`, having set no ref.
    pub fn import_bundle_with(
        &self,
        path: &Path,
        trust: Option<&TrustedKeys>,
        progress: &Progress,
    ) -> Result<ImportReport> {
        let bundle = Bundle::open_trusted(path, trust)?;
        let digests: Vec<[u8; 32]> = bundle.digests().copied().collect();
        let sizes = |raw: &[u8; 32]| bundle.locate(raw).map_or(0, |(_, len)| len as u64);
        progress.set_total(digests.iter().map(sizes).sum());

        // Held until the refs are set: GC must not sweep a blob that is
        // written but not yet named.
        let _lock = self.lock(LockMode::Shared)?;
        // Leaves first (in parallel), then manifests children-first: an
        // import killed part-way never leaves a manifest whose children are
        // not stored.
        let (manifests, leaves): (Vec<[u8; 32]>, Vec<[u8; 32]>) =
            (digests.iter()).partition(|raw| bundle.get(raw).is_some_and(looks_like_manifest));
        let import_one = |raw: &[u8; 32]| {
            progress.check(path)?;
            let outcome = self.import_blob(&bundle, raw);
            progress.add(sizes(raw));
            outcome
        };
        let mut outcomes: Vec<Result<Outcome>> =
            crate::pool::install(|| leaves.par_iter().map(import_one).collect());
        for raw in children_first(&bundle, manifests) {
            let outcome = import_one(&raw);
            let failed = outcome.is_err();
            outcomes.push(outcome);
            if failed {
                break;
            }
        }
        let mut report = ImportReport::default();
        let mut corrupt = Vec::new();
        for outcome in outcomes {
            match outcome? {
                Outcome::New(len) => {
                    report.objects_new += 1;
                    report.bytes_new += len;
                }
                Outcome::Repaired(len) => {
                    report.objects_repaired += 1;
                    report.bytes_new += len;
                }
                Outcome::Present => report.objects_present += 1,
                Outcome::Corrupt(digest) => corrupt.push(digest),
            }
        }

        let mut blocked = None;
        let mut conflicts = Vec::new();
        for (name, raw) in bundle.refs() {
            let target = digest_of(raw);
            let mut marked = Marked::default();
            self.mark([target], Strictness::Record, &mut marked)?;
            // Name the bundle's own damage rather than its consequence.
            let problem = (marked.missing.iter().find(|d| corrupt.contains(d)))
                .or(marked.corrupt.first())
                .map(|&digest| Error::Corrupt { digest })
                .or_else(|| {
                    marked
                        .missing
                        .first()
                        .map(|&digest| Error::Missing { digest })
                });
            if let Some(err) = problem {
                blocked.get_or_insert(err);
                continue;
            }
            let current = match self.get_ref(name) {
                Ok(current) => current,
                Err(e @ (Error::InvalidName(_) | Error::Format(_))) => {
                    conflicts.push((name.clone(), e.to_string()));
                    continue;
                }
                Err(e) => return Err(e),
            };
            if current != Some(target) {
                match self.write_ref_locked(name, &target) {
                    Ok(()) => report.refs_changed += 1,
                    Err(e @ Error::InvalidName(_)) => {
                        conflicts.push((name.clone(), e.to_string()));
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            report.refs += 1;
        }
        match blocked {
            Some(err) => Err(err),
            None if !conflicts.is_empty() => Err(Error::RefConflicts(conflicts)),
            None => Ok(report),
        }
    }

    /// Copies one blob of `bundle` into the store; the caller holds the GC
    /// lock shared.
    fn import_blob(&self, bundle: &Bundle, raw: &[u8; 32]) -> Result<Outcome> {
        let digest = digest_of(raw);
        let bytes = bundle
            .get(raw)
            .expect("digest comes from the bundle's own index");
        let damaged = match self.existing(&digest, Expect::Bytes(bytes))? {
            Existing::Good(file) => {
                self.keep_fresh(&digest, &file)?;
                return Ok(Outcome::Present);
            }
            Existing::Absent => false,
            Existing::Damaged { .. } => true,
        };
        // The mapping is read-only and bundles are never modified in place,
        // so the bytes written below are the bytes hashed here.
        if hash_bytes(bytes) != digest {
            return Ok(Outcome::Corrupt(digest));
        }
        let len = bytes.len() as u64;
        Ok(
            match self.put_locked(
                &digest,
                Expect::Bytes(bytes),
                |file| file.write_all(bytes),
                None,
            )? {
                true if damaged => Outcome::Repaired(len),
                true => Outcome::New(len),
                false => Outcome::Present,
            },
        )
    }
}
