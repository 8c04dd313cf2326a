//! What is in the store, and what this handle has done since it was opened.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::FileType;

use crate::base::beneath::{Dir, EntryStat};
use crate::error::Result;
use crate::hash::Digest;
use crate::store::refs::walk_refs;
use crate::store::Store;

/// Operation counters of one open store (relaxed atomics: they are
/// statistics, not synchronisation).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    puts: AtomicU64,
    gets: AtomicU64,
    misses: AtomicU64,
    dedup_hits: AtomicU64,
}

impl Counters {
    pub fn count_put(&self) {
        self.puts.fetch_add(1, Ordering::Relaxed);
    }
    pub fn count_get(&self) {
        self.gets.fetch_add(1, Ordering::Relaxed);
    }
    pub fn count_miss(&self) {
        self.misses.fetch_add(1, Ordering::Relaxed);
    }
    pub fn count_dedup_hit(&self) {
        self.dedup_hits.fetch_add(1, Ordering::Relaxed);
    }
}

/// A snapshot of the store's contents and this handle's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Objects on disk.
    pub objects: u64,
    /// Their total size.
    pub bytes: u64,
    /// Refs on disk.
    pub refs: u64,
    /// Puts through this handle that found their content already stored.
    pub dedup_hits: u64,
    /// Puts through this handle (including manifests and dedup hits).
    pub puts: u64,
    /// Gets through this handle.
    pub gets: u64,
    /// Gets through this handle of objects that were not stored.
    pub misses: u64,
}

/// One entry found at an object path: normally a regular file; anything
/// else there (a symlink, a directory) is damage that `verify` reports.
pub(crate) struct ObjectEntry {
    pub digest: Digest,
    /// For messages only.
    pub path: PathBuf,
    /// Its fan-out directory, through which it is reached.
    pub fan: Dir,
    /// Its name there.
    pub name: String,
    pub meta: EntryStat,
}

impl Store {
    /// Counts objects, bytes and refs on disk, and reads the counters.
    pub fn stats(&self) -> Result<Stats> {
        let objects: Vec<_> = (self.list_objects()?.into_iter())
            .filter(|o| o.meta.is_file())
            .collect();
        let mut refs = 0u64;
        walk_refs(&self.dirs.refs, "", &mut |_, _, _| refs += 1)?;
        Ok(Stats {
            objects: objects.len() as u64,
            bytes: objects.iter().map(|o| o.meta.len()).sum(),
            refs,
            dedup_hits: self.counters.dedup_hits.load(Ordering::Relaxed),
            puts: self.counters.puts.load(Ordering::Relaxed),
            gets: self.counters.gets.load(Ordering::Relaxed),
            misses: self.counters.misses.load(Ordering::Relaxed),
        })
    }

    /// Every entry at an object path, found by listing the fan-out
    /// directories without following links. Entries that are not named like
    /// objects are ignored; files that vanish while we list (a concurrent GC)
    /// are skipped.
    pub(crate) fn list_objects(&self) -> Result<Vec<ObjectEntry>> {
        let mut out = Vec::new();
        for (prefix, kind) in self.dirs.objects.entries()? {
            if prefix.len() != 2 || kind != FileType::Directory {
                continue;
            }
            // Raced away, or replaced by a link: nothing of ours is there.
            let Ok(Some(fan)) = self.dirs.objects.descend(&prefix, false) else {
                continue;
            };
            for (rest, _) in fan.entries()? {
                let Ok(digest) = Digest::from_hex(&format!("{prefix}{rest}")) else {
                    continue;
                };
                if let Some(meta) = fan.stat(&rest)? {
                    out.push(ObjectEntry {
                        digest,
                        path: fan.path().join(&rest),
                        fan: fan.clone(),
                        name: rest,
                        meta,
                    });
                }
            }
        }
        Ok(out)
    }
}
