//! Moving entries between a store and a bundle: export packs refs and
//! everything they reach into one file; import unpacks one, deduplicating
//! against what the store already holds.
//!
//! This layer sits above both `store` and `bundle`, which know nothing of each other.

mod export;
mod import;
#[cfg(test)]
mod tests;

pub use import::ImportReport;
