//! Progress and cancellation for long operations (export, import, verify, GC).
//!
//! The operation counts units of work into atomics; whoever started it reads
//! them from another thread (a progress bar) and may ask it to stop. Nothing
//! here calls back into the caller, so the store core stays free of any idea
//! of who is watching, and worker threads never wait on a reader.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Shared counters of one long operation: how much is done out of how much,
/// and whether it was asked to stop. All methods take `&self`; relaxed
/// atomics suffice because the numbers are only ever displayed.
#[derive(Debug, Default)]
pub struct Progress {
    done: AtomicU64,
    total: AtomicU64,
    cancelled: AtomicBool,
}

impl Progress {
    /// A fresh progress: nothing done, nothing known to do.
    pub fn new() -> Progress {
        Progress::default()
    }

    /// Declares how many units (bytes, usually) the operation will process.
    pub fn set_total(&self, total: u64) {
        self.total.store(total, Ordering::Relaxed);
    }

    /// Records `n` more units done.
    pub fn add(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    /// Units done so far.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Units the operation expects to process (0 while it is still planning).
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Asks the operation to stop at its next check.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// Fails with an `Interrupted` I/O error naming `path` once cancelled.
    ///
    /// Operations call this between units of work; what they finished stays
    /// valid (every unit is itself crash-safe), they just stop early.
    pub fn check(&self, path: &Path) -> Result<()> {
        if self.is_cancelled() {
            let e = io::Error::new(io::ErrorKind::Interrupted, "operation cancelled");
            return Err(Error::io(path, e));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_cancels() {
        let p = Progress::new();
        p.set_total(10);
        p.add(3);
        p.add(4);
        assert_eq!((p.done(), p.total()), (7, 10));
        assert!(p.check(Path::new("x")).is_ok());
        p.cancel();
        let err = p.check(Path::new("x")).unwrap_err();
        assert!(
            matches!(err, Error::Io { ref source, .. } if source.kind() == io::ErrorKind::Interrupted)
        );
    }
}
