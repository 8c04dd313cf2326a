//! Size-capped eviction: drop the least recently used refs until what is
//! left fits under a cap, then sweep.
//!
//! "Used" is the ref file's mtime, which `set_ref` sets and `touch_ref`
//! (called on every load hit) refreshes. The plan is exact: under the
//! exclusive GC lock nothing changes while we plan, and the sweep that
//! follows frees precisely the objects the plan counted as freed.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use crate::error::Result;
use crate::hash::Digest;
use crate::lock::LockMode;
use crate::store::gc::GcReport;
use crate::store::mark::{Marked, Strictness};
use crate::store::Store;

/// What [`Store::evict`] did (or, with `dry_run`, would do).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EvictReport {
    /// Refs deleted, least recently used first.
    pub refs_evicted: Vec<String>,
    /// Bytes of all objects before.
    pub bytes_before: u64,
    /// Bytes of all objects after the sweep. Above the cap only when objects
    /// protected by the grace period alone exceed it: the cap cannot be met
    /// then, and only refs whose deletion frees bytes were deleted.
    pub bytes_after: u64,
    /// The sweep that followed.
    pub gc: GcReport,
}

impl Store {
    /// Deletes least recently used refs until the objects that remaining
    /// refs reach, plus those the grace period protects, fit in `max_size`
    /// bytes; then sweeps like [`gc`](Self::gc) with the same `grace`.
    ///
    /// Objects younger than `grace` survive whether or not an evicted ref
    /// reached them (a writer may be about to reference them), so with the
    /// default grace freshly written entries free their space only at a
    /// later GC; pass `Duration::ZERO` when nothing writes concurrently.
    /// Ties in use time go to the ref whose name sorts first. A ref whose
    /// deletion would free no byte is never deleted.
    pub fn evict(&self, max_size: u64, dry_run: bool, grace: Duration) -> Result<EvictReport> {
        let _lock = self.lock(LockMode::Exclusive)?;
        let cutoff = SystemTime::now()
            .checked_sub(grace)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let objects = self.list_objects()?;
        let mut sizes: HashMap<Digest, u64> = HashMap::with_capacity(objects.len());
        let mut young = Vec::new();
        for object in objects.iter().filter(|o| o.meta.is_file()) {
            sizes.insert(object.digest, object.meta.len);
            if object.meta.mtime > cutoff {
                young.push(object.digest);
            }
        }
        // What the sweep will keep whatever refs remain: young objects and
        // everything they reach (see `gc`).
        let mut protected = Marked::default();
        self.mark_young(young, &mut protected)?;

        let mut closures = self.closures(Strictness::Fail)?;
        let mut holders: HashMap<Digest, u32> = HashMap::new();
        for closure in &closures {
            for digest in &closure.reached {
                *holders.entry(*digest).or_default() += 1;
            }
        }
        let bytes_before: u64 = sizes.values().sum();
        let mut kept: u64 = sizes
            .iter()
            .filter(|(d, _)| holders.contains_key(*d) || protected.reached.contains(*d))
            .map(|(_, len)| len)
            .sum();

        closures.sort_by(|a, b| (a.mtime, &a.name).cmp(&(b.mtime, &b.name)));
        let mut gone = vec![false; closures.len()];
        for (i, closure) in closures.iter().enumerate() {
            if kept <= max_size {
                break;
            }
            gone[i] = true;
            for digest in &closure.reached {
                let count = holders.get_mut(digest).expect("counted above");
                *count -= 1;
                if *count == 0 && !protected.reached.contains(digest) {
                    kept -= sizes.get(digest).copied().unwrap_or(0);
                }
            }
        }
        // A ref whose deletion frees nothing (all it reaches is young, or
        // still reached by a ref that stays) is kept: deleting it would lose
        // an entry and gain no byte, as when a store written within the
        // grace period cannot shrink at all. Keeping one can make another's
        // deletion free nothing, so repeat until none changes; `kept` stays
        // the same throughout.
        let mut changed = true;
        while changed {
            changed = false;
            for i in (0..closures.len()).rev() {
                if !gone[i] {
                    continue;
                }
                let frees = closures[i]
                    .reached
                    .iter()
                    .any(|d| holders.get(d) == Some(&0) && !protected.reached.contains(d));
                if !frees {
                    gone[i] = false;
                    changed = true;
                    for digest in &closures[i].reached {
                        *holders.get_mut(digest).expect("counted above") += 1;
                    }
                }
            }
        }
        let (gone, remaining): (Vec<_>, Vec<_>) = closures.iter().zip(&gone).partition(|(_, &g)| g);
        let gone: Vec<_> = gone.into_iter().map(|(c, _)| c).collect();
        if !dry_run {
            for closure in &gone {
                self.delete_ref(&closure.name)?;
            }
        }
        let roots = remaining.iter().map(|(c, _)| c.digest).collect();
        let gc = self.sweep_locked(roots, dry_run, grace)?;
        Ok(EvictReport {
            refs_evicted: gone.iter().map(|c| c.name.clone()).collect(),
            bytes_before,
            bytes_after: bytes_before.saturating_sub(gc.bytes_freed),
            gc,
        })
    }
}
