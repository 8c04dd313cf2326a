//! Long operations with a Python progress callback.
//!
//! Without a callback the operation simply runs with the GIL released. With
//! one, it runs on a helper thread while the calling thread sleeps without
//! the GIL, waking every [`TICK`] to call `callback(done, total)` and to
//! check for signals; an exception from either (Ctrl-C included) cancels the
//! operation at its next check and is raised once it has stopped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::error::Error;
use crate::progress::Progress;

/// How often the callback is called.
const TICK: Duration = Duration::from_millis(100);

/// Runs `work`, reporting its progress to `callback` (if not None).
pub(crate) fn run<T: Send>(
    py: Python<'_>,
    callback: Option<&Bound<'_, PyAny>>,
    work: impl FnOnce(&Progress) -> Result<T, Error> + Send,
) -> PyResult<T> {
    let progress = Progress::new();
    let Some(callback) = callback.filter(|c| !c.is_none()) else {
        return Ok(py.detach(|| work(&progress))?);
    };
    let finished = AtomicBool::new(false);
    let caller = thread::current();
    thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let result = work(&progress);
            finished.store(true, Ordering::Release);
            caller.unpark();
            result
        });
        let mut failure: Option<PyErr> = None;
        loop {
            py.detach(|| {
                let until = Instant::now() + TICK;
                while !finished.load(Ordering::Acquire) {
                    let now = Instant::now();
                    if now >= until {
                        break;
                    }
                    thread::park_timeout(until - now);
                }
            });
            if failure.is_none() {
                let step = (callback.call1((progress.done(), progress.total())))
                    .and_then(|_| py.check_signals());
                if let Err(e) = step {
                    progress.cancel();
                    failure = Some(e);
                }
            }
            if finished.load(Ordering::Acquire) {
                break;
            }
        }
        let joined = py.detach(|| worker.join());
        let result = joined.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        match failure {
            Some(e) => Err(e),
            None => Ok(result?),
        }
    })
}
