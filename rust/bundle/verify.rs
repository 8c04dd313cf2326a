//! Checking blob bytes against their digests, and paging blobs in ahead of use.

use memmap2::Advice;
use rayon::prelude::*;

use super::format::PAGE_ALIGN;
use super::reader::Bundle;
use super::{corrupt_error, io_error, missing_error};
use crate::error::Error;
use crate::progress::Progress;

/// Result of [`Bundle::verify_all`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Number of blobs hashed.
    pub blobs: u64,
    /// Number of blob bytes hashed.
    pub bytes: u64,
    /// Digests whose bytes do not hash to them, in increasing order.
    pub corrupt: Vec<[u8; 32]>,
}

// Blobs at least this large get a WILLNEED hint before hashing so the kernel reads them in
// large requests instead of fault-sized ones; for smaller blobs the syscall costs more.
const WILLNEED_MIN: usize = 64 << 10;

impl Bundle {
    /// Hashes one blob and checks it against its digest: `Error::Missing` if the bundle does
    /// not hold it, `Error::Corrupt` if the bytes do not match.
    pub fn verify_blob(&self, digest: &[u8; 32]) -> Result<(), Error> {
        let bytes = self.blob(digest)?;
        if hash(bytes, true) != *digest {
            return Err(corrupt_error(digest));
        }
        Ok(())
    }

    /// Hashes every blob and reports those whose bytes do not match their digest.
    ///
    /// With `parallel`, blobs are hashed concurrently on the rayon pool and large blobs are
    /// additionally split across threads, so a bundle in the page cache verifies at close to
    /// memory bandwidth. Corruption is reported, not raised, so a caller can see all of it.
    pub fn verify_all(&self, parallel: bool) -> Result<VerifyReport, Error> {
        self.verify_all_with(parallel, &Progress::new())
    }

    /// [`verify_all`](Self::verify_all), counting hashed bytes into `progress`; once it is
    /// cancelled, the remaining blobs are skipped and the call fails with `Interrupted`.
    pub fn verify_all_with(
        &self,
        parallel: bool,
        progress: &Progress,
    ) -> Result<VerifyReport, Error> {
        let inner = self.inner();
        let map: &[u8] = &inner.map;
        let n = inner.index.len();
        let bytes = (0..n).map(|i| inner.index.entry(map, i).1 as u64).sum();
        progress.set_total(bytes);
        let check = |i: usize| -> Option<[u8; 32]> {
            if progress.is_cancelled() {
                return None;
            }
            let digest = inner.index.digest(map, i);
            let (offset, len) = inner.index.entry(map, i);
            let bad = !self.hash_matches(digest, offset, len, parallel);
            progress.add(len as u64);
            bad.then_some(*digest)
        };
        // Collecting from an indexed parallel iterator keeps index order, so `corrupt` is sorted.
        let corrupt: Vec<[u8; 32]> = if parallel {
            crate::pool::install(|| (0..n).into_par_iter().filter_map(check).collect())
        } else {
            (0..n).filter_map(check).collect()
        };
        progress.check(self.path())?;
        Ok(VerifyReport {
            blobs: n as u64,
            bytes,
            corrupt,
        })
    }

    /// Hashes the given blobs (concurrently with `parallel`) and returns those whose bytes do
    /// not match, in the order given. A digest the bundle does not hold is `Error::Missing`.
    ///
    /// This is the bulk check a loader runs over the blobs one entry needs, rather than the
    /// whole bundle.
    pub fn verify_blobs(
        &self,
        digests: &[[u8; 32]],
        parallel: bool,
    ) -> Result<Vec<[u8; 32]>, Error> {
        let mut located = Vec::with_capacity(digests.len());
        for digest in digests {
            let (offset, len) = self.locate(digest).ok_or_else(|| missing_error(digest))?;
            located.push((digest, offset, len));
        }
        let check = |&(digest, offset, len): &(&[u8; 32], usize, usize)| {
            (!self.hash_matches(digest, offset, len, parallel)).then_some(*digest)
        };
        Ok(if parallel {
            crate::pool::install(|| located.par_iter().filter_map(check).collect())
        } else {
            located.iter().filter_map(check).collect()
        })
    }

    /// Whether the `len` bytes at `offset` hash to `digest`.
    fn hash_matches(&self, digest: &[u8; 32], offset: usize, len: usize, parallel: bool) -> bool {
        let map = &self.inner().map;
        if len >= WILLNEED_MIN {
            // Only a hint: if the kernel refuses it, hashing still reads the pages.
            let _ = map.advise_range(Advice::WillNeed, offset, len);
        }
        hash(&map[offset..offset + len], parallel) == *digest
    }

    /// Asks the kernel to start reading the given blobs' pages (`MADV_WILLNEED`) so that
    /// later accesses do not stall on page faults. Neighbouring blobs are merged into one
    /// request. A digest the bundle does not hold is `Error::Missing`.
    pub fn prefetch(&self, digests: &[[u8; 32]]) -> Result<(), Error> {
        let mut ranges = Vec::with_capacity(digests.len());
        for digest in digests {
            let (offset, len) = self.locate(digest).ok_or_else(|| missing_error(digest))?;
            if len > 0 {
                ranges.push((offset, offset + len));
            }
        }
        ranges.sort_unstable();
        let page = PAGE_ALIGN as usize;
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
        for (start, end) in ranges {
            match merged.last_mut() {
                // Ranges within a page of each other share or nearly share pages: one call.
                Some(last) if start <= last.1 + page => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        let map = &self.inner().map;
        for (start, end) in merged {
            map.advise_range(Advice::WillNeed, start, end - start)
                .map_err(|e| io_error(self.path(), e))?;
        }
        Ok(())
    }
}

/// blake3 of one blob; with `parallel`, large blobs are also split across the rayon pool
/// (at the store's measured threshold), which nests fine inside the across-blob parallelism.
fn hash(bytes: &[u8], parallel: bool) -> [u8; 32] {
    if parallel {
        *crate::hash::hash_bytes(bytes).as_bytes()
    } else {
        *blake3::hash(bytes).as_bytes()
    }
}
