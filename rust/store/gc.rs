//! Garbage collection: mark from refs through manifests, then sweep
//! unreferenced objects older than a grace period.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use rustix::fs::FileType;

use crate::base::manifest::Manifest;
use crate::error::Result;
use crate::hash::Digest;
use crate::lock::LockMode;
use crate::store::mark::{Marked, Strictness};
use crate::store::stats::ObjectEntry;
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
    /// `Store::keep_fresh`); the last rule covers a manifest written but not
    /// yet referenced, whose children may be old. Tmp files older than
    /// `grace` are removed: no write is in flight while we hold the lock, so
    /// they belong to crashed writers.
    ///
    /// Fails closed: an object a ref reaches that does not hash to its name
    /// (whatever its size: it may be a manifest with damaged first bytes),
    /// or a manifest of an unknown version, stops the GC before anything is
    /// removed. Damage no ref reaches never stops it: that is garbage and is
    /// swept (see `Store::mark_young`).
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
            if !marked.reached.contains(&object.digest) && object.meta.mtime > cutoff {
                young.push(object.digest);
            }
        }
        self.mark_young(young, &mut marked)?;

        let mut report = GcReport {
            dry_run,
            ..GcReport::default()
        };
        let mut garbage = Vec::new();
        for object in objects {
            if marked.reached.contains(&object.digest) {
                report.objects_kept += 1;
            } else if object.meta.kind != FileType::Directory {
                garbage.push(object);
            }
        }
        for object in parents_first(self, garbage) {
            if !dry_run && !object.fan.unlink(&object.name)? {
                continue;
            }
            report.objects_freed += 1;
            report.bytes_freed += object.meta.len;
        }

        for (name, _) in self.dirs.tmp.entries()? {
            let Some(meta) = self.dirs.tmp.stat(&name)? else {
                continue;
            };
            // Links are removed, never followed; directories are not ours.
            if meta.kind != FileType::Directory
                && meta.mtime <= cutoff
                && (dry_run || self.dirs.tmp.unlink(&name)?)
            {
                report.tmp_freed += 1;
            }
        }
        Ok(report)
    }
}

/// Orders garbage so that every manifest comes before the objects it lists.
///
/// Why: a GC killed part-way must not leave a manifest whose children are
/// gone (a later `put_manifest` dedup or `set_ref` could bring it back to
/// life). Removing parents first means whatever survives a kill still has
/// all its children.
fn parents_first(store: &Store, garbage: Vec<ObjectEntry>) -> Vec<ObjectEntry> {
    let index: HashMap<Digest, usize> = (garbage.iter().enumerate())
        .map(|(i, o)| (o.digest, i))
        .collect();
    let mut children: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, object) in garbage.iter().enumerate() {
        if !object.meta.is_file() {
            continue;
        }
        let Ok((file, _)) = store.open_object(&object.digest) else {
            continue;
        };
        if !Store::starts_like_manifest(&file) {
            continue;
        }
        let Ok(blob) = store.map_object(&object.digest) else {
            continue;
        };
        if let Some(Ok(manifest)) = Manifest::decode(&blob) {
            let listed = manifest
                .children
                .iter()
                .filter_map(|c| index.get(c).copied());
            children.insert(i, listed.collect());
        }
    }
    // Reverse postorder of a depth-first walk: a topological order, since a
    // content-addressed graph has no cycles (the visited set guards anyway).
    let mut visited = HashSet::new();
    let mut post = Vec::with_capacity(garbage.len());
    for start in 0..garbage.len() {
        if !visited.insert(start) {
            continue;
        }
        let mut stack = vec![(start, 0usize)];
        while let Some((node, next)) = stack.pop() {
            let kids = children.get(&node).map_or(&[][..], Vec::as_slice);
            if let Some(&kid) = kids.get(next) {
                stack.push((node, next + 1));
                if visited.insert(kid) {
                    stack.push((kid, 0));
                }
            } else {
                post.push(node);
            }
        }
    }
    let mut slots: Vec<Option<ObjectEntry>> = garbage.into_iter().map(Some).collect();
    post.iter().rev().filter_map(|&i| slots[i].take()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::store::Options;
    use serde_json::Map;
    use std::fs;

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

    /// Replaces the object at `digest`'s path with `bytes`.
    fn damage(s: &Store, digest: &Digest, bytes: &[u8]) {
        let p = s.object_path(digest);
        fs::remove_file(&p).unwrap();
        fs::write(&p, bytes).unwrap();
    }

    #[test]
    fn unreferenced_damage_never_stops_gc() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path().join("s"), Options::default()).unwrap();
        let child = s.put(b"child").unwrap().digest;
        let stray = s.put_manifest(&[child], Map::new()).unwrap().digest;
        let mut bytes = s.get(&stray).unwrap().to_vec();
        *bytes.last_mut().unwrap() = b' ';
        damage(&s, &stray, &bytes);
        let fifo_digest = crate::hash::hash_bytes(b"never stored");
        let fifo = s.object_path(&fifo_digest);
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Both are young: the grace period would keep them, but damage no
        // ref reaches is swept rather than stopping the GC.
        let report = s.gc(false, Duration::from_secs(3600)).unwrap();
        assert_eq!(report.objects_freed, 2);
        assert!(!s.contains(&stray).unwrap() && !s.contains(&fifo_digest).unwrap());
        assert!(s.contains(&child).unwrap());
        // The same under eviction.
        let stray = s.put_manifest(&[child], Map::new()).unwrap().digest;
        damage(&s, &stray, b"precompile-manifest\n{");
        s.evict(0, false, Duration::from_secs(3600)).unwrap();
        assert!(!s.contains(&stray).unwrap());
    }

    #[test]
    fn a_large_manifest_with_a_damaged_first_byte_keeps_its_children() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path().join("s"), Options::default()).unwrap();
        let child = s.put(b"reachable child").unwrap().digest;
        // Over MAX_MANIFEST_LEN, through `put` (as an import or a pull can).
        let mut meta = Map::new();
        let pad = "x".repeat(crate::base::manifest::MAX_MANIFEST_LEN + 10);
        meta.insert("pad".into(), pad.into());
        let bytes = Manifest {
            children: vec![child],
            meta,
        }
        .encode();
        let m = s.put(&bytes).unwrap().digest;
        s.set_ref("big", &m).unwrap();
        let mut damaged = bytes.clone();
        damaged[0] = b'P';
        damage(&s, &m, &damaged);
        let err = s.gc(false, Duration::ZERO).unwrap_err();
        assert!(
            matches!(err, Error::Corrupt { digest } if digest == m),
            "{err}"
        );
        assert!(s.contains(&child).unwrap());
        assert!(matches!(
            s.evict(u64::MAX, false, Duration::ZERO),
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

    #[test]
    fn garbage_goes_parents_first() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path().join("s"), Options::default()).unwrap();
        let mut chain = vec![s.put(b"bottom").unwrap().digest];
        for i in 0..20 {
            let mut meta = Map::new();
            meta.insert("level".into(), i.into());
            let next = s
                .put_manifest(&[*chain.last().unwrap()], meta)
                .unwrap()
                .digest;
            chain.push(next);
        }
        // A diamond too: two parents share a child.
        let shared = s.put(b"shared").unwrap().digest;
        let left = s
            .put_manifest(&[shared, chain[3]], Map::new())
            .unwrap()
            .digest;
        let mut meta = Map::new();
        meta.insert("side".into(), "right".into());
        let right = s.put_manifest(&[shared], meta).unwrap().digest;
        let garbage = s.list_objects().unwrap();
        let order: Vec<Digest> = parents_first(&s, garbage)
            .iter()
            .map(|o| o.digest)
            .collect();
        let at = |d: &Digest| order.iter().position(|x| x == d).unwrap();
        for pair in chain.windows(2) {
            assert!(at(&pair[1]) < at(&pair[0]));
        }
        assert!(at(&left) < at(&shared) && at(&right) < at(&shared));
        assert!(at(&left) < at(&chain[3]));
        assert_eq!(order.len(), chain.len() + 3);
    }

    #[test]
    fn unknown_manifest_version_stops_gc() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path().join("s"), Options::default()).unwrap();
        let child = s.put(b"c").unwrap().digest;
        let doc = format!(
            "precompile-manifest\n{{\"version\":7,\"children\":[\"{child}\"],\"meta\":{{}}}}"
        );
        let m = s.put(doc.as_bytes()).unwrap().digest;
        s.set_ref("m", &m).unwrap();
        assert!(matches!(s.gc(false, Duration::ZERO), Err(Error::Format(_))));
        assert!(s.contains(&child).unwrap());
        let report = s.verify().unwrap();
        assert_eq!(report.unknown, vec![m]);
        assert!(!report.ok());
    }
}
