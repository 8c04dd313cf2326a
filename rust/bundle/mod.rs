//! Bundles: single pack files that carry a set of refs and every blob they reach.
//!
//! A bundle ships a model's whole precompile output to a serving host in one file, which
//! the host maps read-only and serves from without copying. [`BundleWriter`] builds one,
//! [`Bundle`] opens one; the layout is documented in [`format`](mod@format).

pub mod format;
mod index;
mod reader;
mod refs;
pub mod sign;
mod verify;
mod walk;
mod writer;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_malformed;
#[cfg(test)]
mod tests_sign;
#[cfg(test)]
mod tests_writer;

use std::path::Path;

pub use reader::{BlobView, Bundle};
pub use refs::{validate_ref_name, MAX_REF_NAME_LEN};
pub use sign::{PublicKey, SecretKey, TrustedKeys};
pub use verify::VerifyReport;
pub use writer::{BundleSummary, BundleWriter};

use crate::error::Error;
use crate::hash::Digest;

// Digests are raw `[u8; 32]` in this module's API: a bundle is a byte format, and the
// store's `hash::Digest` converts to and from them with `as_bytes` / `From<blake3::Hash>`.

// The constructors below are the only places this module builds errors, so the mapping onto
// the crate's `Error` variants lives in one spot.

/// A malformed bundle.
fn format_error(msg: impl Into<String>) -> Error {
    Error::Format(msg.into())
}

fn io_error(path: &Path, source: std::io::Error) -> Error {
    Error::io(path, source)
}

fn missing_error(digest: &[u8; 32]) -> Error {
    Error::Missing {
        digest: store_digest(digest),
    }
}

fn corrupt_error(digest: &[u8; 32]) -> Error {
    Error::Corrupt {
        digest: store_digest(digest),
    }
}

fn store_digest(digest: &[u8; 32]) -> Digest {
    blake3::Hash::from_bytes(*digest).into()
}

fn hex(digest: &[u8; 32]) -> String {
    store_digest(digest).to_hex()
}
