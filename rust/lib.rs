//! precompile's store core: a content-addressed, memory-mapped object store
//! for torch.compile precompile artifacts.
//!
//! Objects are named by their blake3 digest and written crash-safely
//! (first writer wins, duplicates cost one stat); reads map the file and hand
//! out its bytes without copying, verified by default; refs name objects,
//! manifests group them, and GC sweeps what no ref reaches.
//!
//! This crate is free of PyO3: `cargo test` exercises it without libpython.
//! The Python binding lives in `python.rs`, behind the `python` feature.

pub mod base;
pub mod bundle;
pub mod error;
pub mod hash;
#[cfg(test)]
mod layers;
pub mod lock;
pub mod pool;
pub mod progress;
pub mod store;
pub mod transfer;

#[cfg(feature = "python")]
mod python;

pub use error::{Error, Result};
pub use hash::{hash_bytes, hash_file, Digest};
pub use progress::Progress;
pub use store::{
    Blob, EvictReport, GcReport, Manifest, Options, PutOutcome, RefUsage, Stats, Store, Usage,
    VerifyReport,
};
pub use transfer::ImportReport;
