//! Malformed bundles: each must fail to open with `Error::Format`, and never be partly used.
//!
//! Most forgeries re-seal the trailer hash after editing, so that the test exercises the
//! specific check it names rather than the trailer hash catching every edit first.

use proptest::prelude::*;

use super::format::{self, read_u64, HEADER_LEN, TRAILER_LEN};
use super::tests::{assorted_blobs, digest_of, write_bundle};
use super::*;
use crate::error::Error;

// Header field offsets, from the table in format.rs.
const VERSION_AT: usize = 8;
const FLAGS_AT: usize = 12;
const BLOB_COUNT_AT: usize = 24;
const REF_COUNT_AT: usize = 32;
const INDEX_OFFSET_AT: usize = 56;
const INDEX_LEN_AT: usize = 64;
const REFS_OFFSET_AT: usize = 72;

/// A small valid bundle: three blobs (one page-sized) and two refs.
fn sample() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let blobs = vec![b"alpha".to_vec(), vec![3u8; 5000], b"gamma".to_vec()];
    let refs = vec![("a".to_string(), 0), ("b/c".to_string(), 1)];
    std::fs::read(write_bundle(dir.path(), &blobs, &refs)).unwrap()
}

fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Recomputes the trailer hash over the header and everything from `index_offset` (taken
/// from the unedited header) to the trailer.
fn reseal(bytes: &mut [u8], index_offset: usize) {
    let end = bytes.len() - TRAILER_LEN;
    let hash = format::trailer_hash(&bytes[..HEADER_LEN], &bytes[index_offset..end]);
    bytes[end..end + 32].copy_from_slice(&hash);
}

/// Applies `edit` to the sample bundle, re-seals it, and returns the open error's message.
fn forged(edit: impl FnOnce(&mut Vec<u8>, &Layout)) -> String {
    let mut bytes = sample();
    let layout = Layout::of(&bytes);
    edit(&mut bytes, &layout);
    reseal(&mut bytes, layout.index);
    open_error(&bytes)
}

fn open_error(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.bundle");
    std::fs::write(&path, bytes).unwrap();
    match Bundle::open(&path) {
        Err(Error::Format(msg)) => msg,
        Err(other) => panic!("expected a Format error, got {other:?}"),
        Ok(_) => panic!("malformed bundle opened"),
    }
}

/// Section offsets of a valid bundle.
struct Layout {
    index: usize,
    count: usize,
    refs: usize,
}

impl Layout {
    fn of(bytes: &[u8]) -> Layout {
        Layout {
            index: read_u64(bytes, INDEX_OFFSET_AT) as usize,
            count: read_u64(bytes, BLOB_COUNT_AT) as usize,
            refs: read_u64(bytes, REFS_OFFSET_AT) as usize,
        }
    }
    fn digest_at(&self, i: usize) -> usize {
        self.index + 2048 + 32 * i
    }
    fn entry_at(&self, i: usize) -> usize {
        self.index + 2048 + 32 * self.count + 16 * i
    }
}

#[test]
fn the_sample_is_valid_and_the_reseal_helper_is_faithful() {
    let mut bytes = sample();
    let index = Layout::of(&bytes).index;
    let before = bytes.clone();
    reseal(&mut bytes, index);
    assert_eq!(bytes, before);
}

#[test]
fn truncated_files_are_rejected() {
    let bytes = sample();
    let n = bytes.len();
    for len in [
        0,
        1,
        8,
        127,
        128,
        167,
        168,
        4096,
        n / 2,
        n - 41,
        n - 40,
        n - 39,
        n - 8,
        n - 1,
    ] {
        open_error(&bytes[..len]);
    }
}

#[test]
fn bad_magic_and_unknown_version_are_rejected() {
    let mut bytes = sample();
    bytes[0] = b'X';
    assert!(open_error(&bytes).contains("magic"));
    let msg = forged(|b, _| b[VERSION_AT..VERSION_AT + 4].copy_from_slice(&7u32.to_le_bytes()));
    assert!(msg.contains("version 7"), "{msg}");
    let msg = forged(|b, _| b[FLAGS_AT] = 1);
    assert!(msg.contains("flags"), "{msg}");
    let msg = forged(|b, _| b[100] = 1);
    assert!(msg.contains("reserved"), "{msg}");
    let mut bytes = sample();
    let n = bytes.len();
    bytes[n - 1] = b'!';
    assert!(open_error(&bytes).contains("end magic"));
}

#[test]
fn a_flipped_metadata_byte_fails_the_trailer_hash() {
    let bytes = sample();
    let layout = Layout::of(&bytes);
    for at in [
        layout.index + 5,
        layout.digest_at(1) + 3,
        layout.entry_at(2) + 1,
        layout.refs + 9,
    ] {
        let mut bad = bytes.clone();
        bad[at] ^= 0x01;
        let msg = open_error(&bad);
        assert!(msg.contains("trailer hash"), "byte {at}: {msg}");
    }
    // Header bytes are hashed too, though most header edits trip a layout check first.
    let mut bad = bytes.clone();
    bad[REF_COUNT_AT] ^= 0x01;
    open_error(&bad);
}

#[test]
fn an_offset_past_the_data_region_is_rejected() {
    let msg = forged(|b, l| {
        let past_eof = (b.len() as u64).next_multiple_of(4096) + 4096;
        put_u64(b, l.entry_at(0), past_eof);
    });
    assert!(msg.contains("outside the data region"), "{msg}");
    // offset + len overflows u64.
    let msg = forged(|b, l| put_u64(b, l.entry_at(0), u64::MAX - 4095));
    assert!(msg.contains("outside the data region"), "{msg}");
    let msg = forged(|b, l| put_u64(b, l.entry_at(0) + 8, 1 << 20));
    assert!(msg.contains("outside the data region"), "{msg}");
}

#[test]
fn a_misaligned_blob_is_rejected() {
    let bytes = sample();
    let layout = Layout::of(&bytes);
    let page_blob = (0..layout.count)
        .find(|&i| read_u64(&bytes, layout.entry_at(i) + 8) >= 4096)
        .unwrap();
    let msg = forged(|b, l| {
        let at = l.entry_at(page_blob);
        let moved = read_u64(b, at) - 64;
        put_u64(b, at, moved);
    });
    assert!(msg.contains("not aligned"), "{msg}");
}

#[test]
fn huge_counts_are_rejected_without_allocating() {
    let msg = forged(|b, _| put_u64(b, BLOB_COUNT_AT, u64::MAX));
    assert!(msg.contains("too large"), "{msg}");
    // A count whose index length is consistent but far larger than the file.
    let msg = forged(|b, _| {
        put_u64(b, BLOB_COUNT_AT, 1 << 40);
        put_u64(b, INDEX_LEN_AT, 2048 + (48 << 40));
    });
    assert!(msg.contains("tile"), "{msg}");
    let msg = forged(|b, l| {
        put_u64(b, REF_COUNT_AT, u64::MAX);
        put_u64(b, l.refs, u64::MAX);
    });
    assert!(msg.contains("ref count"), "{msg}");
    // Counts that disagree with the table's contents.
    let msg = forged(|b, l| {
        put_u64(b, REF_COUNT_AT, 1);
        put_u64(b, l.refs, 1);
    });
    assert!(msg.contains("trailing bytes"), "{msg}");
    let msg = forged(|b, _| put_u64(b, REF_COUNT_AT, 1));
    assert!(msg.contains("header says 1"), "{msg}");
    // The second ref's name length runs past the end of the table.
    let msg = forged(|b, l| b[l.refs + 8 + 2 + 1 + 32] = 200);
    assert!(msg.contains("truncated"), "{msg}");
}

#[test]
fn a_duplicate_or_unsorted_digest_is_rejected() {
    let msg = forged(|b, l| {
        let first = b[l.digest_at(0)..l.digest_at(1)].to_vec();
        b[l.digest_at(1)..l.digest_at(2)].copy_from_slice(&first);
    });
    assert!(msg.contains("duplicate digest"), "{msg}");
    let msg = forged(|b, l| {
        let (d0, d1) = (l.digest_at(0), l.digest_at(1));
        let first = b[d0..d1].to_vec();
        b.copy_within(d1..d1 + 32, d0);
        b[d1..d1 + 32].copy_from_slice(&first);
    });
    assert!(msg.contains("not sorted"), "{msg}");
}

#[test]
fn a_bad_fanout_is_rejected() {
    let msg = forged(|b, l| put_u64(b, l.index + 8 * 255, 2));
    assert!(msg.contains("fan-out"), "{msg}");
    let msg = forged(|b, l| put_u64(b, l.index, 3));
    assert!(msg.contains("fan-out"), "{msg}");
}

#[test]
fn bad_refs_are_rejected() {
    // Ref "a" (first entry after the u64 count) pointing at a digest the index lacks.
    let msg = forged(|b, l| b[l.refs + 8 + 2 + 1] ^= 0xff);
    assert!(msg.contains("not in the bundle"), "{msg}");
    let msg = forged(|b, l| b[l.refs + 8 + 2] = b'.');
    assert!(msg.contains("invalid ref name"), "{msg}");
    // Swap the two refs' order by renaming "a" to "c": "c" > "b/c".
    let msg = forged(|b, l| b[l.refs + 8 + 2] = b'c');
    assert!(msg.contains("sorted"), "{msg}");
}

/// A bundle with blobs on both sides of every alignment boundary (but none large, to keep
/// hundreds of cases fast), built once for all cases.
fn flip_sample() -> &'static (Vec<Vec<u8>>, Vec<u8>) {
    static SAMPLE: std::sync::OnceLock<(Vec<Vec<u8>>, Vec<u8>)> = std::sync::OnceLock::new();
    SAMPLE.get_or_init(|| {
        let blobs: Vec<Vec<u8>> = assorted_blobs()
            .into_iter()
            .filter(|b| b.len() < 1 << 20)
            .take(12)
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = write_bundle(dir.path(), &blobs, &[("r".to_string(), 3)]);
        (blobs, std::fs::read(path).unwrap())
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_truncation_is_rejected(cut in any::<prop::sample::Index>()) {
        let bytes = sample();
        open_error(&bytes[..cut.index(bytes.len())]);
    }

    /// Any flipped byte either fails open with `Format`, or lies in the data region, where
    /// verification catches it unless it only hit padding.
    #[test]
    fn any_flipped_byte_is_caught(at in any::<prop::sample::Index>(), mask in 1u8..) {
        let (blobs, original) = flip_sample();
        let mut bytes = original.clone();
        let at = at.index(bytes.len());
        let in_data = (HEADER_LEN..Layout::of(&bytes).index).contains(&at);
        bytes[at] ^= mask;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("flipped.bundle");
        std::fs::write(&path, &bytes).unwrap();
        match Bundle::open(&path) {
            // Metadata is fully checked at open; data bytes are left to verification.
            Err(Error::Format(_)) => prop_assert!(!in_data),
            Err(other) => prop_assert!(false, "unexpected error {:?}", other),
            Ok(bundle) => {
                prop_assert!(in_data);
                let report = bundle.verify_all(true).unwrap();
                let hit: Vec<[u8; 32]> = bundle.digests().copied().filter(|d| {
                    let (offset, len) = bundle.locate(d).unwrap();
                    (offset..offset + len).contains(&at)
                }).collect();
                prop_assert_eq!(report.corrupt, hit.clone());
                for blob in blobs {
                    let d = digest_of(blob);
                    prop_assert!(hit.contains(&d) || bundle.get(&d) == Some(&blob[..]));
                }
            }
        }
    }
}
