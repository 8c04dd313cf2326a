//! Store <-> bundle glue, usage and eviction, end to end on real files.

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use serde_json::Map;

use crate::bundle::{Bundle, BundleWriter};
use crate::error::Error;
use crate::hash::{hash_bytes, Digest};
use crate::progress::Progress;
use crate::store::{Options, Store};

fn store(path: &Path) -> Store {
    Store::open(path, Options::default()).unwrap()
}

/// Two entries sharing one blob: `a` -> [shared, a-only], `b` -> [shared, nested -> [b-only]].
fn two_entries(s: &Store) -> (Digest, Digest, [Digest; 4]) {
    let shared = s.put(&[7u8; 10_000]).unwrap().digest;
    let a_only = s.put(b"a only").unwrap().digest;
    let b_only = s.put(&[9u8; 5_000]).unwrap().digest;
    let nested = s.put_manifest(&[b_only], Map::new()).unwrap().digest;
    let a = s
        .put_manifest(&[shared, a_only], Map::new())
        .unwrap()
        .digest;
    let b = s
        .put_manifest(&[shared, nested], Map::new())
        .unwrap()
        .digest;
    s.set_ref("dynamo/a", &a).unwrap();
    s.set_ref("dynamo/b", &b).unwrap();
    (a, b, [shared, a_only, b_only, nested])
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn export_import_roundtrip_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let src = store(&dir.path().join("src"));
    let (a, b, leaves) = two_entries(&src);
    let garbage = src.put(b"not reachable").unwrap().digest;
    let path = dir.path().join("out.bundle");

    let summary = src
        .export_bundle(&names(&["dynamo/a", "dynamo/b"]), &path)
        .unwrap();
    assert_eq!((summary.blobs, summary.refs), (6, 2));
    let bundle = Bundle::open(&path).unwrap();
    assert!(!bundle.contains(garbage.as_bytes()));
    assert_eq!(bundle.get_ref("dynamo/a"), Some(a.as_bytes()));
    assert!(bundle.verify_all(true).unwrap().corrupt.is_empty());
    // Depth-first from the ref: an entry's manifest comes right before its first child.
    let offset = |d: &Digest| bundle.locate(d.as_bytes()).unwrap().0;
    assert!(offset(&a) < offset(&leaves[0]) && offset(&leaves[0]) < offset(&leaves[1]));

    let dst = store(&dir.path().join("dst"));
    dst.put(b"a only").unwrap();
    let first = dst.import_bundle(&path).unwrap();
    assert_eq!((first.objects_new, first.objects_present), (5, 1));
    assert_eq!((first.refs, first.refs_changed), (2, 2));
    assert_eq!(dst.get_ref("dynamo/b").unwrap(), Some(b));
    for d in leaves.iter().chain([&a, &b]) {
        assert_eq!(
            dst.get(d).unwrap().as_bytes(),
            src.get(d).unwrap().as_bytes()
        );
    }
    assert!(dst.verify().unwrap().ok());

    let again = dst.import_bundle(&path).unwrap();
    assert_eq!(
        (again.objects_new, again.objects_present, again.bytes_new),
        (0, 6, 0)
    );
    assert_eq!((again.refs, again.refs_changed), (2, 0));
}

#[test]
fn export_refuses_unknown_refs_and_corrupt_objects() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("s"));
    let (_, _, leaves) = two_entries(&s);
    let path = dir.path().join("x.bundle");
    let err = s.export_bundle(&names(&["nope"]), &path).unwrap_err();
    assert!(matches!(err, Error::NoSuchRef(_)), "{err}");

    let p = s.object_path(&leaves[1]);
    fs::remove_file(&p).unwrap();
    fs::write(&p, b"a onlY").unwrap();
    let err = s.export_bundle(&names(&["dynamo/a"]), &path).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(!path.exists());
    // Unaffected entries still export.
    s.export_bundle(&names(&["dynamo/b"]), &path).unwrap();

    fs::remove_file(&p).unwrap();
    let err = s.export_bundle(&names(&["dynamo/a"]), &path).unwrap_err();
    assert!(matches!(err, Error::Missing { .. }), "{err}");
}

#[test]
fn corrupt_bundle_blob_blocks_only_the_refs_that_reach_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = store(&dir.path().join("src"));
    let (_, b, leaves) = two_entries(&src);
    let path = dir.path().join("out.bundle");
    src.export_bundle(&names(&["dynamo/a", "dynamo/b"]), &path)
        .unwrap();
    // Blob bytes are covered by their digest, not the trailer: the bundle still opens.
    let (offset, _) = Bundle::open(&path)
        .unwrap()
        .locate(leaves[1].as_bytes())
        .unwrap();
    let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(b"X", offset as u64).unwrap();

    let dst = store(&dir.path().join("dst"));
    let err = dst.import_bundle(&path).unwrap_err();
    assert!(
        matches!(err, Error::Corrupt { digest } if digest == leaves[1]),
        "{err}"
    );
    assert_eq!(dst.get_ref("dynamo/a").unwrap(), None);
    assert_eq!(dst.get_ref("dynamo/b").unwrap(), Some(b));
    assert!(!dst.contains(&leaves[1]).unwrap());
    assert!(dst.verify().unwrap().ok());
}

#[test]
fn incomplete_bundle_sets_no_dangling_ref() {
    let dir = tempfile::tempdir().unwrap();
    let child = hash_bytes(b"never shipped");
    let manifest = crate::store::Manifest {
        children: vec![child],
        meta: Map::new(),
    }
    .encode();
    let m = hash_bytes(&manifest);
    let path = dir.path().join("partial.bundle");
    let mut writer = BundleWriter::create(&path).unwrap();
    writer.add_blob(*m.as_bytes(), &manifest).unwrap();
    writer.add_ref("dynamo/m", *m.as_bytes()).unwrap();
    writer.finish().unwrap();

    let dst = store(&dir.path().join("dst"));
    let err = dst.import_bundle(&path).unwrap_err();
    assert!(
        matches!(err, Error::Missing { digest } if digest == child),
        "{err}"
    );
    assert_eq!(dst.get_ref("dynamo/m").unwrap(), None);
}

#[test]
fn cancelled_export_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("s"));
    two_entries(&s);
    let path = dir.path().join("x.bundle");
    let progress = Progress::new();
    progress.cancel();
    let err = s
        .export_bundle_with(&names(&["dynamo/a"]), &path, None, &progress)
        .unwrap_err();
    assert!(
        matches!(err, Error::Io { ref source, .. } if source.kind() == std::io::ErrorKind::Interrupted)
    );
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);

    let ok = Progress::new();
    s.export_bundle_with(&names(&["dynamo/a"]), &path, None, &ok)
        .unwrap();
    let a = s.get_ref("dynamo/a").unwrap().unwrap();
    assert_eq!(ok.total(), 10_000 + 6 + s.get(&a).unwrap().len() as u64);
    assert_eq!(ok.done(), ok.total());
}

#[test]
fn usage_counts_sharing() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("s"));
    let (a, _, _) = two_entries(&s);
    s.put(b"garbage").unwrap();
    let usage = s.usage().unwrap();
    let [ua, ub] = &usage.refs[..] else {
        panic!("{usage:?}")
    };
    let size = |d: &Digest| s.get(d).unwrap().len() as u64;
    assert_eq!(
        (ua.name.as_str(), ua.digest, ua.objects, ua.missing),
        ("dynamo/a", a, 3, 0)
    );
    assert_eq!(ua.bytes, 10_000 + 6 + size(&a));
    assert_eq!(ua.unique_bytes, 6 + size(&a));
    assert_eq!(ub.objects, 4);
    assert_eq!(usage.logical_bytes, ua.bytes + ub.bytes);
    assert_eq!(usage.reachable_bytes, usage.logical_bytes - 10_000);
    assert_eq!(usage.bytes, usage.reachable_bytes + 7);
    assert_eq!(usage.objects, 7);
}

#[test]
fn evict_drops_least_recently_used_first() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(&dir.path().join("s"));
    let mut refs = Vec::new();
    for (i, name) in ["e/old", "e/mid", "e/new"].iter().enumerate() {
        let leaf = s.put(&vec![i as u8; 100_000]).unwrap().digest;
        let m = s.put_manifest(&[leaf], Map::new()).unwrap().digest;
        s.set_ref(name, &m).unwrap();
        refs.push(name.to_string());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Using "e/old" makes "e/mid" the least recently used.
    s.touch_ref("e/old").unwrap();
    let before = s.stats().unwrap().bytes;

    let plan = s.evict(250_000, true, Duration::ZERO).unwrap();
    assert_eq!(plan.refs_evicted, ["e/mid"]);
    assert_eq!(plan.bytes_before, before);
    assert!(plan.bytes_after <= 250_000 && plan.gc.dry_run);
    assert_eq!(s.refs("").unwrap().len(), 3);

    // Under the default grace nothing young is freed, whatever the cap, so
    // no ref is deleted for nothing, planned or done.
    let graced = s.evict(0, true, Duration::from_secs(3600)).unwrap();
    assert_eq!((graced.refs_evicted.len(), graced.bytes_after), (0, before));
    let graced = s.evict(0, false, Duration::from_secs(3600)).unwrap();
    assert_eq!((graced.refs_evicted.len(), graced.bytes_after), (0, before));
    assert_eq!(s.refs("").unwrap().len(), 3);

    let done = s.evict(250_000, false, Duration::ZERO).unwrap();
    assert_eq!(done.refs_evicted, ["e/mid"]);
    assert_eq!(s.refs("").unwrap(), ["e/new", "e/old"]);
    assert_eq!(s.stats().unwrap().bytes, done.bytes_after);
    assert_eq!(done.gc.objects_freed, 2);
    assert!(s.verify().unwrap().ok());
    assert!(s
        .evict(u64::MAX, false, Duration::ZERO)
        .unwrap()
        .refs_evicted
        .is_empty());
}
