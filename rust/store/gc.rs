//! Garbage collection: mark from refs through manifests, then sweep
//! unreferenced objects older than a grace period.

use std::fs;
use std::io;
use std::time::{Duration, SystemTime};

use crate::error::{Error, IoContext, Result};
use crate::hash::Digest;
use crate::lock::LockMode;
use crate::store::durable::mtime;
use crate::store::mark::{Marked, Strictness};
use crate::store::Store;

/// What a GC freed (or, with `dry_run`, would free).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Objects removed.
    pub objects_freed: u64,
    /// Their total size.
    pub bytes_freed: u64,
    /// Objects kept: reachable, or unreferenced but within the grace period.
    pub objects_kept: u64,
    /// Stale tmp files removed (left behind by crashed writers).
    pub tmp_freed: u64,
    /// True when nothing was actually removed.
    pub dry_run: bool,
}

impl Store {
    /// Collects garbage under the exclusive GC lock.
    ///
    /// Kept: everything reachable from a ref, every object modified within
    /// `grace`, and everything those young objects reach. The grace period
    /// covers the window between a put and the ref that will name it (writes
    /// refresh the mtime of old objects they dedup against, see
    /// `Store::freshen`); the last rule covers a manifest written but not yet
    /// referenced, whose children may be old. Tmp files older than `grace`
    /// are removed: no write is in flight while we hold the lock, so they
    /// belong to crashed writers.
    pub fn gc(&self, dry_run: bool, grace: Duration) -> Result<GcReport> {
        let _lock = self.lock(LockMode::Exclusive)?;
        self.sweep_locked(self.ref_targets()?, dry_run, grace)
    }

    /// The sweep of [`gc`](Self::gc), keeping what `roots` reach (plus young
    /// objects); the caller holds the GC lock exclusive.
    pub(crate) fn sweep_locked(
        &self,
        roots: Vec<Digest>,
        dry_run: bool,
        grace: Duration,
    ) -> Result<GcReport> {
        let cutoff = SystemTime::now()
            .checked_sub(grace)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut marked = Marked::default();
        self.mark(roots, Strictness::Fail, &mut marked)?;

        let objects = self.list_objects()?;
        let mut young = Vec::new();
        for object in &objects {
            if !marked.reached.contains(&object.digest)
                && mtime(&object.meta, &object.path)? > cutoff
            {
                young.push(object.digest);
            }
        }
        self.mark(young, Strictness::Fail, &mut marked)?;

        let mut report = GcReport {
            dry_run,
            ..GcReport::default()
        };
        for object in objects {
            if marked.reached.contains(&object.digest) {
                report.objects_kept += 1;
                continue;
            }
            if !dry_run && !remove_if_present(&object.path)? {
                continue;
            }
            report.objects_freed += 1;
            report.bytes_freed += object.meta.len();
        }

        let tmp_dir = self.layout.tmp_dir();
        for entry in fs::read_dir(&tmp_dir).at(&tmp_dir)? {
            let path = entry.at(&tmp_dir)?.path();
            let meta = match fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(path, e)),
            };
            if meta.is_file()
                && mtime(&meta, &path)? <= cutoff
                && (dry_run || remove_if_present(&path)?)
            {
                report.tmp_freed += 1;
            }
        }
        Ok(report)
    }
}

fn remove_if_present(path: &std::path::Path) -> Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Options;
    use serde_json::Map;

    #[test]
    fn sweeps_only_unreachable() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path().join("s"), Options::default()).unwrap();
        let kept_leaf = s.put(b"leaf via manifest").unwrap().digest;
        let nested = s.put_manifest(&[kept_leaf], Map::new()).unwrap().digest;
        let top = s.put_manifest(&[nested], Map::new()).unwrap().digest;
        let direct = s.put(b"direct").unwrap().digest;
        let garbage = s.put(b"garbage").unwrap().digest;
        s.set_ref("a/top", &top).unwrap();
        s.set_ref("b", &direct).unwrap();

        // Everything is young under the default grace.
        assert_eq!(
            s.gc(false, Duration::from_secs(3600))
                .unwrap()
                .objects_freed,
            0
        );
        let dry = s.gc(true, Duration::ZERO).unwrap();
        assert_eq!(
            (dry.objects_freed, dry.objects_kept, dry.dry_run),
            (1, 4, true)
        );
        assert!(s.contains(&garbage).unwrap());
        let real = s.gc(false, Duration::ZERO).unwrap();
        assert_eq!((real.objects_freed, real.objects_kept), (1, 4));
        assert_eq!(real.bytes_freed, 7);
        assert!(!s.contains(&garbage).unwrap());
        for d in [kept_leaf, nested, top, direct] {
            assert!(s.contains(&d).unwrap());
        }
        s.delete_ref("a/top").unwrap();
        assert_eq!(s.gc(false, Duration::ZERO).unwrap().objects_freed, 3);
    }

    #[test]
    fn young_manifest_protects_old_children() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path().join("s"), Options::default()).unwrap();
        let child = s.put(b"old child").unwrap().digest;
        std::thread::sleep(Duration::from_millis(300));
        s.put_manifest(&[child], Map::new()).unwrap();
        // The child is older than the grace period, the unreferenced
        // manifest is not: keeping the manifest keeps its child.
        let report = s.gc(false, Duration::from_millis(150)).unwrap();
        assert_eq!((report.objects_freed, report.objects_kept), (0, 2));
    }

    #[test]
    fn corrupt_manifest_stops_gc() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path().join("s"), Options::default()).unwrap();
        let child = s.put(b"c").unwrap().digest;
        let m = s.put_manifest(&[child], Map::new()).unwrap().digest;
        s.set_ref("m", &m).unwrap();
        let p = s.object_path(&m);
        let mut bytes = fs::read(&p).unwrap();
        *bytes.last_mut().unwrap() = b' ';
        fs::remove_file(&p).unwrap();
        fs::write(&p, bytes).unwrap();
        assert!(matches!(
            s.gc(false, Duration::ZERO),
            Err(Error::Corrupt { .. })
        ));
        assert!(s.contains(&child).unwrap());
    }

    #[test]
    fn stale_tmp_files_go() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path().join("s"), Options::default()).unwrap();
        fs::write(s.layout().tmp_dir().join("crashed.tmp"), b"partial").unwrap();
        assert_eq!(s.gc(false, Duration::from_secs(60)).unwrap().tmp_freed, 0);
        assert_eq!(s.gc(false, Duration::ZERO).unwrap().tmp_freed, 1);
        assert_eq!(fs::read_dir(s.layout().tmp_dir()).unwrap().count(), 0);
    }
}
