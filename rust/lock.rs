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
//!
//! A GC never holds the gate for long while it waits: when the writers in
//! flight do not finish within [`GC_PATIENCE`] (a writer stopped with
//! SIGSTOP, a slow disk), it lets go of the gate so new writers pass, and
//! tries again a little later, until its own timeout.
//!
//! Lock files are opened read-only (flock needs no write access): members of
//! a group-shared store can lock a file another member created, and a store
//! on a read-only mount can still be verified and exported. Where a lock
//! file is missing and cannot be created (a read-only store), a shared lock
//! is skipped: nobody can write to such a store, so there is no GC to exclude.

use std::fs::File;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use rustix::fs::OFlags;

use crate::base::beneath::Dir;
use crate::error::{Error, Result};

/// The lock file.
pub const LOCK_NAME: &str = "gc.lock";
/// The gate passed before taking it.
pub const GATE_NAME: &str = "gc.gate";

/// How long a GC holds the gate while waiting for writers in flight.
pub const GC_PATIENCE: Duration = Duration::from_millis(250);
/// How long a GC stays off the gate before trying again: more than twice the
/// longest poll interval, so polling writers see the gate free.
const GC_STEP_ASIDE: Duration = Duration::from_millis(150);

/// How a lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockMode {
    /// Many holders at once; excludes `Exclusive`.
    Shared,
    /// One holder; excludes everyone.
    Exclusive,
}

/// A held flock; released when dropped (closing the descriptor drops it).
/// `None` inside: a shared lock skipped on a store that cannot be written.
#[derive(Debug)]
pub struct FileLock {
    // Never read: the lock lives exactly as long as this descriptor.
    _file: Option<File>,
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
    pub fn acquire(dir: &Dir, name: &str, mode: LockMode, timeout: Duration) -> Result<FileLock> {
        Self::acquire_within(dir, name, mode, Instant::now(), timeout)
    }

    /// Opens the lock file read-only without following a link, creating it
    /// when missing; `None` when it is missing and cannot be created.
    fn open(dir: &Dir, name: &str) -> Result<Option<File>> {
        let path = dir.path().join(name);
        match dir.open(name, OFlags::RDONLY, 0) {
            Ok(file) => return Ok(Some(file)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => return Err(Error::io(path, e)),
        }
        // 0666 less the umask: in a group-shared store (umask 002) the file
        // is group-writable, though reading is all a lock needs.
        match dir.open(name, OFlags::RDONLY | OFlags::CREATE, 0o644) {
            Ok(file) => Ok(Some(file)),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EROFS) | Some(libc::EACCES)) => {
                Ok(None)
            }
            Err(e) => Err(Error::io(path, e)),
        }
    }

    /// Like `acquire`, counting `timeout` from `start`.
    fn acquire_within(
        dir: &Dir,
        name: &str,
        mode: LockMode,
        start: Instant,
        timeout: Duration,
    ) -> Result<FileLock> {
        let path = dir.path().join(name);
        let Some(file) = Self::open(dir, name)? else {
            if mode == LockMode::Shared {
                return Ok(FileLock { _file: None });
            }
            return Err(Error::io(
                &path,
                std::io::Error::from_raw_os_error(libc::EROFS),
            ));
        };
        let mut backoff = FIRST_BACKOFF;
        loop {
            // Fully qualified: std's File has inherent methods of the same
            // names since Rust 1.89, newer than our minimum supported Rust.
            let attempt = match mode {
                LockMode::Shared => fs4::FileExt::try_lock_shared(&file),
                LockMode::Exclusive => fs4::FileExt::try_lock(&file),
            };
            match attempt {
                Ok(()) => return Ok(FileLock { _file: Some(file) }),
                Err(fs4::TryLockError::WouldBlock) => {}
                Err(fs4::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(Error::LockTimeout {
                    path: PathBuf::from(&path),
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
    /// Passes the gate and takes the lock (both in `dir`) in `mode`, all
    /// within `timeout`. An exclusive taker holds the gate at most
    /// [`GC_PATIENCE`] at a time (see the module docs).
    pub fn acquire(dir: &Dir, mode: LockMode, timeout: Duration) -> Result<GcLock> {
        let start = Instant::now();
        if mode == LockMode::Shared {
            let gate = FileLock::acquire_within(dir, GATE_NAME, mode, start, timeout)?;
            let lock = FileLock::acquire_within(dir, LOCK_NAME, mode, start, timeout)?;
            drop(gate);
            return Ok(GcLock { _lock: lock });
        }
        loop {
            let gate = FileLock::acquire_within(dir, GATE_NAME, mode, start, timeout)?;
            let left = timeout.saturating_sub(start.elapsed());
            let attempt = FileLock::acquire_within(
                dir,
                LOCK_NAME,
                mode,
                Instant::now(),
                left.min(GC_PATIENCE),
            );
            drop(gate);
            match attempt {
                Ok(lock) => return Ok(GcLock { _lock: lock }),
                Err(Error::LockTimeout { path, .. }) => {
                    let left = timeout.saturating_sub(start.elapsed());
                    if left.is_zero() {
                        return Err(Error::LockTimeout {
                            path,
                            seconds: timeout.as_secs_f64(),
                        });
                    }
                    thread::sleep(GC_STEP_ASIDE.min(left));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_dir(p: &std::path::Path) -> Dir {
        Dir::open_root(p).unwrap()
    }

    #[test]
    fn shared_locks_coexist_and_exclude_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let d = open_dir(dir.path());
        let p = "l";
        let a = FileLock::acquire(&d, p, LockMode::Shared, Duration::ZERO).unwrap();
        let _b = FileLock::acquire(&d, p, LockMode::Shared, Duration::ZERO).unwrap();
        let t = Instant::now();
        let err =
            FileLock::acquire(&d, p, LockMode::Exclusive, Duration::from_millis(60)).unwrap_err();
        assert!(matches!(err, Error::LockTimeout { .. }), "{err}");
        assert!(t.elapsed() >= Duration::from_millis(60));
        drop(a);
        drop(_b);
        let _x = FileLock::acquire(&d, p, LockMode::Exclusive, Duration::ZERO).unwrap();
        assert!(FileLock::acquire(&d, p, LockMode::Shared, Duration::ZERO).is_err());
    }

    #[test]
    fn waiter_gets_lock_once_released() {
        let dir = tempfile::tempdir().unwrap();
        let d = open_dir(dir.path());
        let held = FileLock::acquire(&d, "l", LockMode::Exclusive, Duration::ZERO).unwrap();
        let d2 = d.clone();
        let waiter = thread::spawn(move || {
            FileLock::acquire(&d2, "l", LockMode::Shared, Duration::from_secs(10))
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
        let d = open_dir(dir.path());
        let stop = Arc::new(AtomicBool::new(false));
        // Two writers whose shared holds always overlap: without the gate,
        // the lock is never free for an exclusive holder.
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (d, stop) = (d.clone(), stop.clone());
                thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let held = GcLock::acquire(&d, LockMode::Shared, Duration::from_secs(10));
                        thread::sleep(Duration::from_millis(5));
                        drop(held.unwrap());
                    }
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(30));
        for _ in 0..5 {
            GcLock::acquire(&d, LockMode::Exclusive, Duration::from_secs(2)).unwrap();
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
        let d = open_dir(dir.path());
        let stop = Arc::new(AtomicBool::new(false));
        let collector = {
            let (d, stop) = (d.clone(), stop.clone());
            thread::spawn(move || {
                // A GC loop that retakes the lock the moment it lets go.
                while !stop.load(Ordering::Relaxed) {
                    let held = GcLock::acquire(&d, LockMode::Exclusive, Duration::from_secs(10));
                    thread::sleep(Duration::from_millis(5));
                    drop(held.unwrap());
                }
            })
        };
        thread::sleep(Duration::from_millis(30));
        let start = Instant::now();
        for _ in 0..20 {
            GcLock::acquire(&d, LockMode::Shared, Duration::from_secs(2)).unwrap();
        }
        assert!(start.elapsed() < Duration::from_secs(2));
        stop.store(true, Ordering::Relaxed);
        collector.join().unwrap();
    }

    #[test]
    fn waiting_gc_steps_aside_for_new_writers() {
        let dir = tempfile::tempdir().unwrap();
        let d = open_dir(dir.path());
        // A writer that stopped while holding the lock shared.
        let stuck = GcLock::acquire(&d, LockMode::Shared, Duration::ZERO).unwrap();
        let collector = {
            let d = d.clone();
            thread::spawn(move || GcLock::acquire(&d, LockMode::Exclusive, Duration::from_secs(10)))
        };
        thread::sleep(Duration::from_millis(100));
        // New writers pass within about one patience period, not the GC's timeout.
        for _ in 0..5 {
            let t = Instant::now();
            drop(GcLock::acquire(&d, LockMode::Shared, Duration::from_secs(10)).unwrap());
            assert!(
                t.elapsed() < GC_PATIENCE + Duration::from_secs(2),
                "{:?}",
                t.elapsed()
            );
            thread::sleep(Duration::from_millis(40));
        }
        drop(stuck);
        assert!(collector.join().unwrap().is_ok());
    }
}
