//! The sorted digest index: a fan-out table, sorted digests, and their (offset, len) entries.
//!
//! Lookup is one fan-out read plus a binary search inside the bucket of digests that share
//! the first byte, so it is O(log n) and touches a few cache lines of the mapping.

use super::format::{read_u64, Header, FANOUT_LEN};
use super::{format_error, hex};
use crate::error::Error;

/// Serializes the index for `entries` (digest, offset, len), which must be sorted by digest
/// and free of duplicates.
pub(crate) fn encode(entries: &[([u8; 32], u64, u64)]) -> Vec<u8> {
    debug_assert!(entries.windows(2).all(|w| w[0].0 < w[1].0));
    let n = entries.len();
    let mut out = Vec::with_capacity(FANOUT_LEN as usize + n * 48);
    let mut counts = [0u64; 256];
    for (digest, _, _) in entries {
        counts[usize::from(digest[0])] += 1;
    }
    let mut running = 0u64;
    for count in counts {
        running += count;
        out.extend_from_slice(&running.to_le_bytes());
    }
    for (digest, _, _) in entries {
        out.extend_from_slice(digest);
    }
    for (_, offset, len) in entries {
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
    }
    out
}

/// Where the validated index lives in the mapping, plus its fan-out table copied out so that
/// lookups need not re-read and re-check it.
#[derive(Debug)]
pub(crate) struct Index {
    count: usize,
    digests_at: usize,
    entries_at: usize,
    /// `bounds[b]..bounds[b + 1]` is the range of digests whose first byte is `b`.
    bounds: Box<[usize; 257]>,
}

impl Index {
    /// Checks the index inside `map` against `header` and returns a view of it.
    ///
    /// The header has already been checked, so `index_offset + index_len` lies inside the
    /// file and `index_len == 2048 + 48 * blob_count`; what is left is the content: the
    /// fan-out is monotone and ends at the count, the digests are strictly increasing and
    /// sit in the buckets the fan-out claims, and every entry lies inside the data region
    /// at the alignment its length requires.
    pub fn validate(map: &[u8], header: &Header) -> Result<Index, Error> {
        let to_usize =
            |v: u64| usize::try_from(v).map_err(|_| format_error("index does not fit in memory"));
        let count = to_usize(header.blob_count)?;
        let fanout_at = to_usize(header.index_offset)?;
        let digests_at = fanout_at + FANOUT_LEN as usize;
        let entries_at = digests_at + count * 32;

        let mut bounds = Box::new([0usize; 257]);
        let mut prev = 0u64;
        for b in 0..256 {
            let cumulative = read_u64(map, fanout_at + 8 * b);
            if cumulative < prev || cumulative > header.blob_count {
                return Err(format_error(format!(
                    "fan-out table is not monotone at byte {b:#04x}"
                )));
            }
            bounds[b + 1] = cumulative as usize;
            prev = cumulative;
        }
        if prev != header.blob_count {
            return Err(format_error(format!(
                "fan-out total {prev} does not match blob count {}",
                header.blob_count
            )));
        }

        let index = Index {
            count,
            digests_at,
            entries_at,
            bounds,
        };
        let mut counts = [0usize; 256];
        for i in 0..count {
            let digest = index.digest(map, i);
            if i > 0 {
                let before = index.digest(map, i - 1);
                if before == digest {
                    return Err(format_error(format!(
                        "duplicate digest {} in index",
                        hex(digest)
                    )));
                }
                if before > digest {
                    return Err(format_error(format!(
                        "index digests are not sorted at entry {i}"
                    )));
                }
            }
            counts[usize::from(digest[0])] += 1;
        }
        // Sorted digests plus matching per-byte counts means every digest is in its bucket.
        for (b, &count) in counts.iter().enumerate() {
            if index.bounds[b + 1] - index.bounds[b] != count {
                return Err(format_error(format!(
                    "fan-out table disagrees with digests at byte {b:#04x}"
                )));
            }
        }

        let data_start = header.data_offset;
        let data_end = header.data_offset + header.data_len; // checked by Header::decode
        for i in 0..count {
            let (offset, len) = index.raw_entry(map, i);
            let end = offset.checked_add(len);
            if offset < data_start || end.is_none_or(|e| e > data_end) {
                return Err(format_error(format!(
                    "blob {} at {offset}+{len} lies outside the data region {data_start}..{data_end}",
                    hex(index.digest(map, i))
                )));
            }
            if offset % header.align_for(len) != 0 {
                return Err(format_error(format!(
                    "blob {} at offset {offset} is not aligned to {}",
                    hex(index.digest(map, i)),
                    header.align_for(len)
                )));
            }
        }
        Ok(index)
    }

    /// Number of blobs.
    pub fn len(&self) -> usize {
        self.count
    }

    /// The `i`-th digest in sorted order; `i < len()`.
    pub fn digest<'m>(&self, map: &'m [u8], i: usize) -> &'m [u8; 32] {
        let at = self.digests_at + 32 * i;
        map[at..at + 32].try_into().expect("32-byte slice")
    }

    fn raw_entry(&self, map: &[u8], i: usize) -> (u64, u64) {
        let at = self.entries_at + 16 * i;
        (read_u64(map, at), read_u64(map, at + 8))
    }

    /// The (offset, len) of the `i`-th blob, validated at open to lie inside the mapping.
    pub fn entry(&self, map: &[u8], i: usize) -> (usize, usize) {
        let (offset, len) = self.raw_entry(map, i);
        (offset as usize, len as usize)
    }

    /// Position of `digest` in the sorted digests, if present.
    pub fn find(&self, map: &[u8], digest: &[u8; 32]) -> Option<usize> {
        let bucket = usize::from(digest[0]);
        let (mut lo, mut hi) = (self.bounds[bucket], self.bounds[bucket + 1]);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.digest(map, mid).cmp(digest) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }
}
