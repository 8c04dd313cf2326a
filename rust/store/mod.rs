//! The content-addressed store: objects named by their blake3 digest, refs
//! naming objects, manifests grouping them, and a GC that sweeps what no ref
//! reaches.
//!
//! Concurrency model, in one place:
//! - Readers (`get`, `contains`, `get_ref`, `refs`) take no locks. Objects are
//!   immutable once visible and are only ever unlinked, never rewritten, so a
//!   mapping taken by a reader stays valid even if GC removes the file.
//! - Writers (`put*`, `set_ref`, `put_manifest`) hold `locks/gc.lock` shared
//!   while they write, so many threads and processes write at once.
//! - GC holds it exclusive. A write that dedups against an old object
//!   refreshes that object's mtime so the grace period protects it until the
//!   caller has had time to reference it (see `objects.rs`).

pub(crate) mod dedup;
mod evict;
mod gc;
pub mod layout;
mod manifest;
pub(crate) mod mark;
mod objects;
pub mod refs;
mod stats;
#[cfg(test)]
mod tests_owner;
mod usage;
mod verify;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{IoContext, Result};
use crate::hash::Digest;
use crate::lock::{GcLock, LockMode};

pub use crate::base::manifest::Manifest;
pub use crate::base::Blob;
pub use evict::EvictReport;
pub use gc::GcReport;
pub use layout::{Dirs, Layout};
pub use objects::PutOutcome;
pub use stats::Stats;
pub use usage::{RefUsage, Usage};
pub use verify::VerifyReport;

use stats::Counters;

/// Default GC grace period: unreferenced objects younger than this survive.
pub const DEFAULT_GC_GRACE: Duration = Duration::from_secs(3600);

/// How a store is opened.
#[derive(Clone, Debug)]
pub struct Options {
    /// Check the blake3 digest of every object `get` returns.
    pub verify: bool,
    /// Create the store if it does not exist yet.
    pub create: bool,
    /// How long a write or GC waits for the GC lock before `LockTimeout`.
    pub lock_timeout: Duration,
    /// A write that finds its object already present refreshes the object's
    /// mtime when it is older than this; half the default grace period, so
    /// the writer keeps at least that long to reference what it wrote.
    pub freshen_after: Duration,
    /// Accept a store shared with other users: owned by someone else, or
    /// writable by a group of ours through a setgid directory (see
    /// `base/owner.rs`). Otherwise a store must be this user's alone.
    pub shared: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            verify: true,
            create: true,
            lock_timeout: Duration::from_secs(30),
            freshen_after: DEFAULT_GC_GRACE / 2,
            shared: false,
        }
    }
}

/// An open store. Cheap to share: all methods take `&self`, and it is
/// `Send + Sync`, so one handle serves many threads.
#[derive(Debug)]
pub struct Store {
    layout: Layout,
    dirs: Dirs,
    options: Options,
    counters: Counters,
    verified: dedup::VerifiedCache,
}

impl Store {
    /// Opens (or with `options.create`, creates) the store at `path`.
    ///
    /// A store owned by another user or writable by others is refused
    /// with `Error::Untrusted` unless `options.shared` accepts it. The
    /// check runs on each directory's open descriptor before anything in it
    /// is read (see `Layout::open`), so swapping the path for another
    /// directory between a check and an open is not possible.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Store> {
        let path = path.as_ref();
        let root = std::path::absolute(path).at(path)?;
        let layout = Layout::new(root);
        let dirs = layout.open(options.create, options.shared)?;
        Ok(Store {
            layout,
            dirs,
            options,
            counters: Counters::default(),
            verified: dedup::VerifiedCache::default(),
        })
    }

    /// The store root, absolute.
    pub fn path(&self) -> &Path {
        self.layout.root()
    }

    /// The on-disk layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The store's open directories.
    pub fn dirs(&self) -> &Dirs {
        &self.dirs
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Where the object named `digest` lives (whether or not it exists).
    pub fn object_path(&self, digest: &Digest) -> PathBuf {
        self.layout.object_path(digest)
    }

    /// Takes the GC lock, waiting at most the store's lock timeout.
    pub(crate) fn lock(&self, mode: LockMode) -> Result<GcLock> {
        GcLock::acquire(&self.dirs.locks, mode, self.options.lock_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Store>();
        assert_send_sync::<Blob>();
        assert_send_sync::<crate::error::Error>();
    }
}
