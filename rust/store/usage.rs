//! Who holds what: each ref's closure, its size, and how much of it is
//! shared with other refs. `ls`, `du` and `stats` report it; size-capped
//! eviction plans with it.

use std::collections::{HashMap, HashSet};
use std::time::SystemTime;

use crate::error::Result;
use crate::hash::Digest;
use crate::store::mark::{Marked, Strictness};
use crate::store::Store;

/// One ref's share of the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefUsage {
    /// The ref's name.
    pub name: String,
    /// The object it names.
    pub digest: Digest,
    /// When it was last set or used (`touch_ref`), if known.
    pub mtime: Option<SystemTime>,
    /// Objects it reaches, itself included.
    pub objects: u64,
    /// Their total size.
    pub bytes: u64,
    /// Bytes reached by this ref and no other: what deleting it would free.
    pub unique_bytes: u64,
    /// Objects it reaches that are absent.
    pub missing: u64,
}

/// Every ref's usage plus store-wide totals, from [`Store::usage`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Per ref, sorted by name.
    pub refs: Vec<RefUsage>,
    /// Objects on disk.
    pub objects: u64,
    /// Their total size.
    pub bytes: u64,
    /// Size of everything some ref reaches, counted once.
    pub reachable_bytes: u64,
    /// Sum of every ref's `bytes`: the size without sharing between refs.
    /// `logical_bytes / reachable_bytes` is the dedup ratio across refs.
    pub logical_bytes: u64,
}

/// One ref and everything it reaches.
pub(crate) struct Closure {
    pub name: String,
    pub digest: Digest,
    pub mtime: Option<SystemTime>,
    pub reached: HashSet<Digest>,
    pub missing: u64,
}

impl Store {
    /// Per-ref closure sizes and store totals. Takes no lock: a concurrent
    /// writer or GC makes the numbers approximate, never wrong in kind.
    /// A corrupt manifest counts as a leaf here; `verify` reports it.
    pub fn usage(&self) -> Result<Usage> {
        let sizes = self.object_sizes()?;
        let closures = self.closures(Strictness::Record)?;
        let mut holders: HashMap<Digest, u32> = HashMap::new();
        for closure in &closures {
            for digest in &closure.reached {
                *holders.entry(*digest).or_default() += 1;
            }
        }
        let size = |d: &Digest| sizes.get(d).copied().unwrap_or(0);
        let refs: Vec<RefUsage> = closures
            .into_iter()
            .map(|c| RefUsage {
                objects: c.reached.len() as u64 - c.missing,
                bytes: c.reached.iter().map(size).sum(),
                unique_bytes: c
                    .reached
                    .iter()
                    .filter(|d| holders[*d] == 1)
                    .map(size)
                    .sum(),
                name: c.name,
                digest: c.digest,
                mtime: c.mtime,
                missing: c.missing,
            })
            .collect();
        Ok(Usage {
            objects: sizes.len() as u64,
            bytes: sizes.values().sum(),
            reachable_bytes: holders.keys().map(size).sum(),
            logical_bytes: refs.iter().map(|r| r.bytes).sum(),
            refs,
        })
    }

    /// Every object's size, by digest.
    pub(crate) fn object_sizes(&self) -> Result<HashMap<Digest, u64>> {
        Ok(self
            .list_objects()?
            .into_iter()
            .filter(|o| o.meta.is_file())
            .map(|o| (o.digest, o.meta.len))
            .collect())
    }

    /// Every ref with its closure, sorted by name. Refs deleted while we
    /// walk are left out.
    pub(crate) fn closures(&self, strictness: Strictness) -> Result<Vec<Closure>> {
        let mut out = Vec::new();
        for name in self.refs("")? {
            let (Some(digest), mtime) = (self.get_ref(&name)?, self.ref_mtime(&name)?) else {
                continue;
            };
            let mut marked = Marked::default();
            self.mark([digest], strictness, &mut marked)?;
            out.push(Closure {
                name,
                digest,
                mtime,
                missing: marked.missing.len() as u64,
                reached: marked.reached,
            });
        }
        Ok(out)
    }
}
