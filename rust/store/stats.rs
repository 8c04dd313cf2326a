//! What is in the store, and what this handle has done since it was opened.

use std::fs::{self, Metadata};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, IoContext, Result};
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

/// One object file found on disk.
pub(crate) struct ObjectEntry {
    pub digest: Digest,
    pub path: PathBuf,
    pub meta: Metadata,
}

impl Store {
    /// Counts objects, bytes and refs on disk, and reads the counters.
    pub fn stats(&self) -> Result<Stats> {
        let objects = self.list_objects()?;
        let mut refs = 0u64;
        walk_refs(&self.layout.refs_dir(), "", &mut |_, _| refs += 1)?;
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

    /// Every object file, found by listing the fan-out directories. Entries
    /// that are not named like objects are ignored; files that vanish while
    /// we list (a concurrent GC) are skipped.
    pub(crate) fn list_objects(&self) -> Result<Vec<ObjectEntry>> {
        let objects_dir = self.layout.objects_dir();
        let mut out = Vec::new();
        for fan in fs::read_dir(&objects_dir).at(&objects_dir)? {
            let fan = fan.at(&objects_dir)?;
            let Some(prefix) = fan.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if prefix.len() != 2 || !fan.file_type().at(&fan.path())?.is_dir() {
                continue;
            }
            let fan_path = fan.path();
            for entry in fs::read_dir(&fan_path).at(&fan_path)? {
                let entry = entry.at(&fan_path)?;
                let Some(rest) = entry.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                let Ok(digest) = Digest::from_hex(&format!("{prefix}{rest}")) else {
                    continue;
                };
                let path = entry.path();
                match fs::symlink_metadata(&path) {
                    Ok(meta) if meta.is_file() => out.push(ObjectEntry { digest, path, meta }),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(path, e)),
                }
            }
        }
        Ok(out)
    }
}
