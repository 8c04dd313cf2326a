//! The one error type of the store core.
//!
//! Every failure the store can report is a variant of [`Error`], so the Python
//! binding can map each to a specific exception class in a single place.

use std::io;
use std::path::{Path, PathBuf};

use crate::hash::Digest;

/// Result alias used throughout the store core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system error, with the path it happened on.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory the failing call touched.
        path: PathBuf,
        /// The underlying error; its kind decides the Python `OSError` subclass.
        #[source]
        source: io::Error,
    },

    /// An object whose content no longer hashes to its name (a flipped byte,
    /// a truncation, a corrupt manifest).
    #[error("object {digest} is corrupt: its content does not hash to its name")]
    Corrupt {
        /// The name of the damaged object.
        digest: Digest,
    },

    /// An object that is not in the store.
    #[error("object {digest} is not in the store")]
    Missing {
        /// The digest that was asked for.
        digest: Digest,
    },

    /// A lock that could not be taken before the timeout.
    #[error("timed out after {seconds} s waiting for lock {}", path.display())]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
        /// How long we waited.
        seconds: f64,
    },

    /// A store or a manifest whose on-disk format we do not understand.
    #[error("{0}")]
    Format(String),

    /// A ref name that fails validation.
    #[error("invalid ref name: {0}")]
    InvalidName(String),

    /// A ref that does not exist where one was required (export).
    #[error("no such ref: {0:?}")]
    NoSuchRef(String),

    /// Refs an import could not set, each with the reason; every other ref
    /// of the bundle was set.
    #[error("{} ref(s) of the bundle conflict with this store and were not set: {}", .0.len(), conflict_list(.0))]
    RefConflicts(Vec<(String, String)>),

    /// A digest string that is not 64 lower-case hex characters.
    #[error("invalid digest {0:?}: expected 64 lower-case hex characters")]
    InvalidDigest(String),

    /// The input changed while it was being stored (a mutable buffer written to
    /// by another thread, or a file modified during `put_file`). Nothing was
    /// stored.
    #[error("{0}")]
    Changed(String),
}

impl Error {
    /// Wraps an `io::Error` with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// True for an I/O error of kind `NotFound`.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

fn conflict_list(conflicts: &[(String, String)]) -> String {
    let names: Vec<String> = conflicts.iter().map(|(n, _)| format!("{n:?}")).collect();
    names.join(", ")
}

/// Attaches a path to the error of an `io::Result`.
pub(crate) trait IoContext<T> {
    /// Turns `io::Result<T>` into `Result<T>` naming `path`.
    fn at(self, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|source| Error::io(path, source))
    }
}
