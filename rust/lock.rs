//! Cross-process advisory locks (flock) with a timeout.
//!
//! The store has one lock, `locks/gc.lock`. Writers hold it shared for the
//! length of a write, so any number of them run at once; GC holds it
//! exclusive, so it never sweeps while a write is between "the object is
//! there" and "the ref or manifest naming it is there". Readers never lock.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Error, IoContext, Result};

/// How a lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockMode {
    /// Many holders at once; excludes `Exclusive`.
    Shared,
    /// One holder; excludes everyone.
    Exclusive,
}

/// A held flock; released when dropped (closing the descriptor drops it).
#[derive(Debug)]
pub struct FileLock {
    // Never read: the lock lives exactly as long as this descriptor.
    _file: File,
}

/// First and largest sleep between attempts while a lock is busy.
const FIRST_BACKOFF: Duration = Duration::from_micros(500);
const MAX_BACKOFF: Duration = Duration::from_millis(50);

impl FileLock {
    /// Takes the lock on `path` (created if missing), polling with exponential
    /// backoff until `timeout` has passed, then failing with `LockTimeout`.
    ///
    /// flock has no timed wait, and a blocking flock cannot be interrupted
    /// from another thread, so we poll with `try_lock`. Each call opens its
    /// own descriptor: flock locks belong to the open file description, so
    /// two threads of one process exclude each other exactly as two processes
    /// do, and a crashed holder's lock is released by the kernel.
    pub fn acquire(path: &Path, mode: LockMode, timeout: Duration) -> Result<FileLock> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .at(path)?;
        let start = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        loop {
            // Fully qualified: std's File has inherent methods of the same
            // names since Rust 1.89, newer than our minimum supported Rust.
            let attempt = match mode {
                LockMode::Shared => fs4::FileExt::try_lock_shared(&file),
                LockMode::Exclusive => fs4::FileExt::try_lock(&file),
            };
            match attempt {
                Ok(()) => return Ok(FileLock { _file: file }),
                Err(fs4::TryLockError::WouldBlock) => {}
                Err(fs4::TryLockError::Error(e)) => return Err(Error::io(path, e)),
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(Error::LockTimeout {
                    path: PathBuf::from(path),
                    seconds: timeout.as_secs_f64(),
                });
            }
            thread::sleep(backoff.min(timeout - waited));
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_locks_coexist_and_exclude_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l");
        let a = FileLock::acquire(&p, LockMode::Shared, Duration::ZERO).unwrap();
        let _b = FileLock::acquire(&p, LockMode::Shared, Duration::ZERO).unwrap();
        let t = Instant::now();
        let err = FileLock::acquire(&p, LockMode::Exclusive, Duration::from_millis(60)).unwrap_err();
        assert!(matches!(err, Error::LockTimeout { .. }), "{err}");
        assert!(t.elapsed() >= Duration::from_millis(60));
        drop(a);
        drop(_b);
        let _x = FileLock::acquire(&p, LockMode::Exclusive, Duration::ZERO).unwrap();
        assert!(FileLock::acquire(&p, LockMode::Shared, Duration::ZERO).is_err());
    }

    #[test]
    fn waiter_gets_lock_once_released() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l");
        let held = FileLock::acquire(&p, LockMode::Exclusive, Duration::ZERO).unwrap();
        let p2 = p.clone();
        let waiter =
            thread::spawn(move || FileLock::acquire(&p2, LockMode::Shared, Duration::from_secs(10)));
        thread::sleep(Duration::from_millis(30));
        drop(held);
        assert!(waiter.join().unwrap().is_ok());
    }
}
