//! Full integrity check: every object rehashed, every ref closure present.

use std::collections::BTreeMap;

use rayon::prelude::*;

use rustix::fs::OFlags;

use crate::error::{Error, IoContext, Result};
use crate::hash::{hash_open_file, Digest};
use crate::lock::LockMode;
use crate::progress::Progress;
use crate::store::mark::{Marked, Strictness};
use crate::store::Store;

/// The outcome of [`Store::verify`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Objects checked.
    pub objects: u64,
    /// Their total size.
    pub bytes: u64,
    /// Objects whose content does not hash to their name, sorted.
    pub corrupt: Vec<Digest>,
    /// Digests reachable from refs (directly or via manifests) but absent,
    /// sorted.
    pub missing: Vec<Digest>,
    /// Reachable manifests of a version this build cannot read (GC refuses
    /// to run while there are any), sorted.
    pub unknown: Vec<Digest>,
    /// For each corrupt, missing or unknown digest that refs reach: the
    /// names of those refs, sorted (what a repair would have to drop).
    /// Damage no ref reaches has no entry.
    pub holders: BTreeMap<Digest, Vec<String>>,
}

impl VerifyReport {
    /// True when nothing is corrupt, missing or unreadable.
    pub fn ok(&self) -> bool {
        self.corrupt.is_empty() && self.missing.is_empty() && self.unknown.is_empty()
    }
}

impl Store {
    /// Rehashes every object (in parallel, on all cores) and checks that
    /// everything refs reach is present.
    ///
    /// Holds the GC lock shared, so a concurrent GC cannot make a reachable
    /// object look missing halfway through; writers carry on. Anything but a
    /// regular file at an object path (a symlink, a directory) is corrupt.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.verify_with(&Progress::new())
    }

    /// [`verify`](Self::verify), counting hashed bytes into `progress` and
    /// stopping early once it is cancelled.
    pub fn verify_with(&self, progress: &Progress) -> Result<VerifyReport> {
        let _lock = self.lock(LockMode::Shared)?;
        let objects = self.list_objects()?;
        progress.set_total(objects.iter().map(|o| o.meta.len).sum());
        let checked: Vec<Result<Option<Digest>>> = crate::pool::install(|| {
            objects
                .par_iter()
                .map(|object| {
                    progress.check(&object.path)?;
                    if !object.meta.is_file() {
                        return Ok(Some(object.digest));
                    }
                    let hashed = (object.fan)
                        .open(&object.name, OFlags::RDONLY | OFlags::NONBLOCK, 0)
                        .at(&object.path)
                        .and_then(|file| {
                            if file.metadata().at(&object.path)?.is_file() {
                                hash_open_file(&file, &object.path).map(Some)
                            } else {
                                Ok(None)
                            }
                        });
                    progress.add(object.meta.len);
                    match hashed {
                        Ok(Some(actual)) => Ok((actual != object.digest).then_some(object.digest)),
                        // Replaced by something that is not a file since listed.
                        Ok(None) => Ok(Some(object.digest)),
                        Err(Error::Io { source, .. })
                            if source.raw_os_error() == Some(libc::ELOOP) =>
                        {
                            Ok(Some(object.digest))
                        }
                        // Only GC removes objects, and it waits for our lock; but an
                        // outside hand may have: report it as missing below if
                        // reachable, otherwise it is simply gone.
                        Err(e) if e.is_not_found() => Ok(None),
                        Err(e) => Err(e),
                    }
                })
                .collect()
        });
        let mut corrupt = Vec::new();
        for result in checked {
            corrupt.extend(result?);
        }

        let mut marked = Marked::default();
        self.mark(self.ref_targets()?, Strictness::Record, &mut marked)?;
        corrupt.extend(marked.corrupt.iter().copied());
        corrupt.sort();
        corrupt.dedup();
        let mut holders: BTreeMap<Digest, Vec<String>> = BTreeMap::new();
        let damaged = |d: &Digest| {
            corrupt.binary_search(d).is_ok()
                || marked.missing.contains(d)
                || marked.unknown.contains(d)
        };
        if !corrupt.is_empty() || !marked.missing.is_empty() || !marked.unknown.is_empty() {
            // closures() walks refs in name order, so each list comes out sorted.
            for closure in self.closures(Strictness::Record)? {
                for digest in closure.reached.iter().filter(|d| damaged(d)) {
                    holders
                        .entry(*digest)
                        .or_default()
                        .push(closure.name.clone());
                }
            }
        }
        Ok(VerifyReport {
            holders,
            objects: objects.len() as u64,
            bytes: objects.iter().map(|o| o.meta.len).sum(),
            corrupt,
            missing: marked.missing.into_iter().collect(),
            unknown: marked.unknown.into_iter().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Options;
    use std::fs;

    #[test]
    fn finds_corrupt_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path().join("s"), Options::default()).unwrap();
        let a = s.put(b"aaaa").unwrap().digest;
        let b = s.put(b"bbbb").unwrap().digest;
        let m = s
            .put_manifest(&[a, b], serde_json::Map::new())
            .unwrap()
            .digest;
        s.set_ref("m", &m).unwrap();
        let clean = s.verify().unwrap();
        assert!(clean.ok());
        assert_eq!(clean.objects, 3);

        let pa = s.object_path(&a);
        fs::remove_file(&pa).unwrap();
        fs::write(&pa, b"aaab").unwrap();
        fs::remove_file(s.object_path(&b)).unwrap();
        let report = s.verify().unwrap();
        assert!(!report.ok());
        assert_eq!(report.corrupt, vec![a]);
        assert_eq!(report.missing, vec![b]);
    }
}
