//! Primitives shared by the store and the bundle format, beneath both: directory handles
//! that never follow links, durable writes, ref-name rules, the manifest encoding, object
//! naming and opening, and the blob type both hand out.
//!
//! Nothing here knows of `store`, `bundle` or `transfer`; they build on it.

pub(crate) mod beneath;
mod blob;
pub mod durable;
pub mod manifest;
mod objects;
mod open;
pub(crate) mod owner;
pub mod ref_name;

pub use blob::Blob;
pub(crate) use objects::{object_names, object_rel, open_object_at, Existing, Expect, Opened};
pub(crate) use open::open_regular;
