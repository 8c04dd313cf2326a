//! The bytes of one object, mapped read-only from its file.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use memmap2::Mmap;

use crate::hash::Digest;

/// An object's content, backed by a shared read-only mapping of its file
/// (or nothing, for the empty object, which cannot be mapped).
///
/// Cloning shares the mapping. The mapping stays valid after the file is
/// unlinked (by GC, say): on Linux an unlinked file lives on while mapped.
#[derive(Clone)]
pub struct Blob {
    digest: Digest,
    map: Option<Arc<Mmap>>,
}

impl Blob {
    pub(crate) fn new(digest: Digest, map: Option<Mmap>) -> Self {
        Blob {
            digest,
            map: map.map(Arc::new),
        }
    }

    /// The object's name.
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// The content.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.map {
            Some(map) => map,
            None => &[],
        }
    }
}

impl Deref for Blob {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<[u8]> for Blob {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl fmt::Debug for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Blob")
            .field("digest", &self.digest)
            .field("len", &self.len())
            .finish()
    }
}
