//! Round-trip and reader tests for bundles; writer behaviour is in `tests_writer`, malformed
//! files in `tests_malformed`.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::*;
use crate::error::Error;

pub(super) fn digest_of(data: &[u8]) -> [u8; 32] {
    *blake3::hash(data).as_bytes()
}

/// Writes a bundle of `blobs` with refs `(name, index into blobs)` and returns its path.
pub(super) fn write_bundle(dir: &Path, blobs: &[Vec<u8>], refs: &[(String, usize)]) -> PathBuf {
    let path = dir.join("test.bundle");
    let mut writer = BundleWriter::create(&path).unwrap();
    for blob in blobs {
        writer.add_blob(digest_of(blob), blob).unwrap();
    }
    for (name, i) in refs {
        writer.add_ref(name, digest_of(&blobs[*i])).unwrap();
    }
    writer.finish().unwrap();
    path
}

/// Blob sizes around every alignment boundary, plus one large enough for blake3's rayon path.
pub(super) fn assorted_blobs() -> Vec<Vec<u8>> {
    let sizes = [0usize, 1, 63, 64, 65, 4095, 4096, 4097, 10_000, 3 << 20];
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n).map(|j| (j * 31 + i * 7) as u8).collect())
        .chain((0..200u32).map(|i| format!("small blob {i}").into_bytes()))
        .collect()
}

pub(super) fn check_roundtrip(path: &Path, blobs: &[Vec<u8>], refs: &[(String, usize)]) {
    let bundle = Bundle::open(path).unwrap();
    let mut want: Vec<[u8; 32]> = blobs.iter().map(|b| digest_of(b)).collect();
    want.sort_unstable();
    want.dedup();
    assert_eq!(bundle.len(), want.len());
    assert_eq!(bundle.digests().copied().collect::<Vec<_>>(), want);
    for blob in blobs {
        let d = digest_of(blob);
        assert!(bundle.contains(&d));
        assert_eq!(bundle.get(&d).unwrap(), &blob[..]);
        assert_eq!(&*bundle.view(&d).unwrap(), &blob[..]);
    }
    let mut want_refs: Vec<(String, [u8; 32])> = refs
        .iter()
        .map(|(n, i)| (n.clone(), digest_of(&blobs[*i])))
        .collect();
    want_refs.sort();
    want_refs.dedup();
    assert_eq!(bundle.refs(), &want_refs[..]);
    for (name, d) in &want_refs {
        assert_eq!(bundle.get_ref(name), Some(d));
    }
    let report = bundle.verify_all(true).unwrap();
    assert_eq!(report.blobs, want.len() as u64);
    assert!(report.corrupt.is_empty());
    assert_eq!(bundle.verify_all(false).unwrap(), report);
}

#[test]
fn empty_bundle_roundtrips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.bundle");
    let summary = BundleWriter::create(&path).unwrap().finish().unwrap();
    assert_eq!(
        summary,
        BundleSummary {
            blobs: 0,
            refs: 0,
            bytes: 128 + 2048 + 8 + 40
        }
    );
    let bundle = Bundle::open(&path).unwrap();
    assert!(bundle.is_empty());
    assert_eq!(bundle.file_len(), summary.bytes);
    assert!(bundle.refs().is_empty());
    assert_eq!(bundle.get(&[0; 32]), None);
    assert_eq!(bundle.get_ref("x"), None);
    assert_eq!(bundle.verify_all(true).unwrap(), VerifyReport::default());
    bundle.prefetch(&[]).unwrap();
}

#[test]
fn single_blob_roundtrips() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = vec![b"hello".to_vec()];
    let refs = vec![("model/graph".to_string(), 0)];
    check_roundtrip(&write_bundle(dir.path(), &blobs, &refs), &blobs, &refs);
}

#[test]
fn empty_blob_roundtrips() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = vec![Vec::new()];
    let refs = vec![("empty".to_string(), 0)];
    check_roundtrip(&write_bundle(dir.path(), &blobs, &refs), &blobs, &refs);
}

#[test]
fn many_blobs_roundtrip_and_are_aligned() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = assorted_blobs();
    let refs: Vec<(String, usize)> = (0..blobs.len())
        .step_by(3)
        .map(|i| (format!("r/{i}"), i))
        .collect();
    let path = write_bundle(dir.path(), &blobs, &refs);
    check_roundtrip(&path, &blobs, &refs);
    let bundle = Bundle::open(&path).unwrap();
    for d in bundle.digests() {
        let (offset, len) = bundle.locate(d).unwrap();
        let ptr = bundle.get(d).unwrap().as_ptr() as usize;
        let align = if len >= 4096 { 4096 } else { 64 };
        assert_eq!(offset % align, 0, "blob of {len} bytes at {offset}");
        // The mapping is page-aligned, so file alignment carries over to memory.
        assert_eq!(ptr % align, 0);
    }
}

#[test]
fn verify_all_reports_a_flipped_data_byte() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = assorted_blobs();
    let path = write_bundle(dir.path(), &blobs, &[]);
    for victim in [2usize, 9, 150] {
        let d = digest_of(&blobs[victim]);
        let (offset, len) = Bundle::open(&path).unwrap().locate(&d).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[offset + len / 2] ^= 0x40;
        let bad = dir.path().join("flipped.bundle");
        std::fs::write(&bad, &bytes).unwrap();
        // The data region is not covered by the trailer, so open succeeds ...
        let bundle = Bundle::open(&bad).unwrap();
        // ... and verification names exactly the damaged blob.
        for parallel in [true, false] {
            let report = bundle.verify_all(parallel).unwrap();
            assert_eq!(report.corrupt, vec![d]);
            assert_eq!(
                report.bytes,
                blobs.iter().map(|b| b.len() as u64).sum::<u64>()
            );
        }
        assert!(matches!(bundle.verify_blob(&d), Err(Error::Corrupt { .. })));
        bundle.verify_blob(&digest_of(&blobs[1])).unwrap();
    }
}

#[test]
fn blob_views_outlive_the_bundle_and_prefetch_checks_digests() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = assorted_blobs();
    let path = write_bundle(dir.path(), &blobs, &[]);
    let bundle = Bundle::open(&path).unwrap();
    let all: Vec<[u8; 32]> = bundle.digests().copied().collect();
    bundle.prefetch(&all).unwrap();
    assert!(matches!(
        bundle.prefetch(&[[9; 32]]),
        Err(Error::Missing { .. })
    ));
    assert!(matches!(bundle.blob(&[9; 32]), Err(Error::Missing { .. })));
    assert!(matches!(
        bundle.verify_blob(&[9; 32]),
        Err(Error::Missing { .. })
    ));
    let view = bundle.view(&digest_of(&blobs[8])).unwrap();
    let clone = bundle.clone();
    drop(bundle);
    drop(clone);
    assert_eq!(view.as_bytes(), &blobs[8][..]);
    assert_eq!(view.len(), blobs[8].len());
    assert_eq!(view.offset() % 4096, 0);
    assert_eq!(view.mmap()[view.offset()..][..view.len()], blobs[8][..]);
}

#[test]
fn bundle_types_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Bundle>();
    assert_send_sync::<BlobView>();
    assert_send_sync::<VerifyReport>();
    fn assert_send<T: Send>() {}
    assert_send::<BundleWriter>();
}

#[test]
fn ref_name_rules() {
    for good in [
        "a",
        "a/b",
        "model/v1.2/graph-0_x",
        &"x".repeat(255),
        "a.b/c..d",
    ] {
        validate_ref_name(good).unwrap();
    }
    for bad in [
        "",
        "/",
        "/a",
        "a//b",
        "a/",
        "..",
        "a/..",
        ".",
        "./a",
        ".a",
        "a\\b",
        "a\0",
        &"x".repeat(256),
    ] {
        assert!(
            matches!(validate_ref_name(bad), Err(Error::InvalidName(_))),
            "{bad:?}"
        );
    }
}

fn ref_name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_-][a-zA-Z0-9_.-]{0,6}(/[a-zA-Z0-9_-][a-zA-Z0-9_.-]{0,6}){0,3}"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_bundles_roundtrip(
        blobs in prop::collection::vec(
            prop_oneof![
                4 => prop::collection::vec(any::<u8>(), 0..200),
                1 => prop::collection::vec(any::<u8>(), 3000..9000),
                // A small alphabet makes repeated (deduplicated) blobs likely.
                2 => prop::collection::vec(0u8..2, 0..3),
            ],
            0..40,
        ),
        refs in prop::collection::vec((ref_name(), any::<prop::sample::Index>()), 0..20),
    ) {
        let dir = tempfile::tempdir().unwrap();
        // Refs need blobs to point at, and one name cannot point at two digests.
        let mut seen = std::collections::BTreeMap::new();
        let refs: Vec<(String, usize)> = if blobs.is_empty() {
            Vec::new()
        } else {
            refs.into_iter()
                .map(|(n, i)| (n, i.index(blobs.len())))
                .filter(|(n, i)| *seen.entry(n.clone()).or_insert(digest_of(&blobs[*i])) == digest_of(&blobs[*i]))
                .collect()
        };
        let path = write_bundle(dir.path(), &blobs, &refs);
        check_roundtrip(&path, &blobs, &refs);
    }

    #[test]
    fn validator_accepts_generated_names(name in ref_name()) {
        prop_assert!(validate_ref_name(&name).is_ok());
    }
}
