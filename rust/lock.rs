//! Cross-process advisory locks (flock) with a timeout.
//!
//! The store has one lock, `locks/gc.lock`. Writers hold it shared for the
//! length of a write, so any number of them run at once; GC holds it
//! exclusive, so it never sweeps while a write is between "the object is
//! there" and "the ref or manifest naming it is there". Readers never lock.
//!
//! flock is not fair: a waiter polls, and whoever retries first wins. With
//! writers overlapping back to back the shared lock is never free, so GC
//! starves; with GC looping, it retakes the lock before a polling writer
//! looks. So a second file, `locks/gc.gate`, orders the two sides: everyone
//! takes the gate (in the same mode) before the lock and lets go of the gate
//! once they hold the lock. A GC holding the gate keeps new writers out while
//! it waits for the writes in flight; writers waiting for a running GC hold
//! the gate shared, so the next GC cannot cut in ahead of them.

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
        Self::acquire_within(path, mode, Instant::now(), timeout)
    }

    /// Like `acquire`, counting `timeout` from `start`.
    fn acquire_within(
        path: &Path,
        mode: LockMode,
        start: Instant,
        timeout: Duration,
    ) -> Result<FileLock> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .at(path)?;
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

/// The store's GC lock, taken through its gate (see the module docs).
#[derive(Debug)]
pub struct GcLock {
    _lock: FileLock,
}

impl GcLock {
    /// Passes `gate` and takes `lock` in `mode`, all within `timeout`.
    pub fn acquire(gate: &Path, lock: &Path, mode: LockMode, timeout: Duration) -> Result<GcLock> {
        let start = Instant::now();
        let gate = FileLock::acquire_within(gate, mode, start, timeout)?;
        let lock = FileLock::acquire_within(lock, mode, start, timeout)?;
        drop(gate);
        Ok(GcLock { _lock: lock })
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
        let err =
            FileLock::acquire(&p, LockMode::Exclusive, Duration::from_millis(60)).unwrap_err();
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
        let waiter = thread::spawn(move || {
            FileLock::acquire(&p2, LockMode::Shared, Duration::from_secs(10))
        });
        thread::sleep(Duration::from_millis(30));
        drop(held);
        assert!(waiter.join().unwrap().is_ok());
    }

    #[test]
    fn gate_lets_exclusive_in_between_overlapping_shared_holders() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let (gate, lock) = (dir.path().join("gate"), dir.path().join("lock"));
        let stop = Arc::new(AtomicBool::new(false));
        // Two writers whose shared holds always overlap: without the gate,
        // the lock is never free for an exclusive holder.
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (gate, lock, stop) = (gate.clone(), lock.clone(), stop.clone());
                thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let held = GcLock::acquire(
                            &gate,
                            &lock,
                            LockMode::Shared,
                            Duration::from_secs(10),
                        );
                        thread::sleep(Duration::from_millis(5));
                        drop(held.unwrap());
                    }
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(30));
        for _ in 0..5 {
            GcLock::acquire(&gate, &lock, LockMode::Exclusive, Duration::from_secs(2)).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
    }

    #[test]
    fn gate_lets_shared_in_between_back_to_back_exclusive_holders() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let (gate, lock) = (dir.path().join("gate"), dir.path().join("lock"));
        let stop = Arc::new(AtomicBool::new(false));
        let collector = {
            let (gate, lock, stop) = (gate.clone(), lock.clone(), stop.clone());
            thread::spawn(move || {
                // A GC loop that retakes the lock the moment it lets go.
                while !stop.load(Ordering::Relaxed) {
                    let held =
                        GcLock::acquire(&gate, &lock, LockMode::Exclusive, Duration::from_secs(10));
                    thread::sleep(Duration::from_millis(5));
                    drop(held.unwrap());
                }
            })
        };
        thread::sleep(Duration::from_millis(30));
        let start = Instant::now();
        for _ in 0..20 {
            GcLock::acquire(&gate, &lock, LockMode::Shared, Duration::from_secs(2)).unwrap();
        }
        assert!(start.elapsed() < Duration::from_secs(2));
        stop.store(true, Ordering::Relaxed);
        collector.join().unwrap();
    }
}
