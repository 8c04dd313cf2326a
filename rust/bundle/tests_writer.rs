//! Writer behaviour: deduplication, streaming, digest checks, refs, and cleanup.

use super::tests::{check_roundtrip, digest_of};
use super::*;
use crate::error::Error;

#[test]
fn repeated_blobs_are_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dedup.bundle");
    let mut writer = BundleWriter::create(&path).unwrap();
    let blob = vec![7u8; 5000];
    assert!(writer.add_blob(digest_of(&blob), &blob).unwrap());
    assert!(!writer.add_blob(digest_of(&blob), &blob).unwrap());
    assert!(!writer
        .add_blob_from_reader(digest_of(&blob), 5000, &blob[..])
        .unwrap());
    let summary = writer.finish().unwrap();
    assert_eq!(summary.blobs, 1);
    assert_eq!(summary.bytes, 4096 + 5000 + 2048 + 48 + 8 + 40);
}

#[test]
fn streamed_blobs_roundtrip_and_bad_ones_leave_no_trace() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.bin");
    let big: Vec<u8> = (0..(2 << 20) + 3).map(|i| (i % 251) as u8).collect();
    std::fs::write(&src, &big).unwrap();
    let path = dir.path().join("streamed.bundle");
    let mut writer = BundleWriter::create(&path).unwrap();
    assert!(writer.add_blob_from_path(digest_of(&big), &src).unwrap());
    // Wrong digest: the bytes are cut off again and the bundle stays consistent.
    let err = writer
        .add_blob_from_reader(digest_of(b"other"), 5, &b"bytes"[..])
        .unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    // A reader shorter than promised is an I/O error, also rolled back.
    let err = writer
        .add_blob_from_reader(digest_of(b"abc"), 10, &b"abc"[..])
        .unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    let err = writer.add_blob(digest_of(b"x"), b"y").unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(writer
        .add_blob_from_reader(digest_of(b"abc"), 3, &b"abc"[..])
        .unwrap());
    assert_eq!(writer.blob_count(), 2);
    writer.finish().unwrap();
    let blobs = vec![big, b"abc".to_vec()];
    check_roundtrip(&path, &blobs, &[]);
}

#[test]
fn refs_are_validated_and_must_reach_a_blob() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = BundleWriter::create(dir.path().join("refs.bundle")).unwrap();
    for bad in [
        "",
        "/abs",
        "a//b",
        "a/",
        "../x",
        "a/../b",
        ".hidden",
        "a/.b",
        "a\\b",
        "nul\0",
        &"x".repeat(256),
    ] {
        let err = writer.add_ref(bad, [1; 32]).unwrap_err();
        assert!(matches!(err, Error::InvalidName(_)), "{bad:?}: {err:?}");
    }
    writer.add_ref("a/b.c", [1; 32]).unwrap();
    writer.add_ref("a/b.c", [1; 32]).unwrap();
    assert!(matches!(
        writer.add_ref("a/b.c", [2; 32]),
        Err(Error::InvalidName(_))
    ));
    assert!(matches!(writer.finish(), Err(Error::Missing { .. })));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "tmp file left behind"
    );
}

#[test]
fn dropped_writer_removes_its_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = BundleWriter::create(dir.path().join("x.bundle")).unwrap();
    writer.add_blob(digest_of(b"data"), b"data").unwrap();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    drop(writer);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
