//! The thread pool every parallel hash, verify and import runs on, made safe
//! across `fork()`.
//!
//! `fork()` copies only the calling thread. A child that inherits an
//! initialized rayon pool inherits its bookkeeping but none of its worker
//! threads, so its first parallel call would queue work that no thread ever
//! runs and hang for good. That is the usual way a serving process that
//! warmed up (verified a bundle, hashed a large blob) and then forked its
//! workers would freeze. So instead of rayon's global pool the crate uses one
//! pool per process: [`install`] checks the pid and, in a forked child,
//! builds a fresh pool on first use.
//!
//! The bookkeeping is a single atomic pointer, not a mutex: a mutex held by
//! another thread at the moment of the fork would stay locked in the child
//! forever. Each generation's pool is leaked on purpose: dropping an
//! inherited pool would wait for threads that do not exist in the child.

use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use rayon::{ThreadPool, ThreadPoolBuilder};

struct Generation {
    pid: u32,
    pool: ThreadPool,
}

static CURRENT: AtomicPtr<Generation> = AtomicPtr::new(ptr::null_mut());

/// This process's pool, built on first use (and again after a fork).
pub fn pool() -> &'static ThreadPool {
    let pid = std::process::id();
    let current = CURRENT.load(Ordering::Acquire);
    // SAFETY: every non-null pointer stored in CURRENT comes from Box::leak
    // below and is never freed, so it is valid for 'static.
    if let Some(generation) = unsafe { current.as_ref() } {
        if generation.pid == pid {
            return &generation.pool;
        }
    }
    let pool = ThreadPoolBuilder::new()
        .thread_name(|i| format!("precompile-{i}"))
        .build()
        .expect("cannot start the worker threads of precompile's thread pool");
    let fresh: &'static mut Generation = Box::leak(Box::new(Generation { pid, pool }));
    match CURRENT.compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => &fresh.pool,
        Err(winner) => {
            // Another thread of this process got there first. Our pool has
            // live threads, so it can be dropped normally.
            // SAFETY: `fresh` was leaked above and never shared.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: as above, `winner` was leaked by whoever stored it; it
            // is this process's generation because only this process's
            // threads can have stored it since our load.
            &unsafe { &*winner }.pool
        }
    }
}

/// Runs `f` on this process's pool; rayon calls inside it (`par_iter`,
/// blake3's `update_rayon`) use that pool. Called from one of the pool's own
/// threads, `f` simply runs inline.
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    pool().install(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    #[test]
    fn one_pool_per_process() {
        assert!(ptr::eq(pool(), pool()));
        let sum: u64 = install(|| (0..1000u64).into_par_iter().sum());
        assert_eq!(sum, 499_500);
        // Nested installs run inline instead of deadlocking.
        assert_eq!(install(|| install(|| 7)), 7);
    }
}
