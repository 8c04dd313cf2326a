//! The bytes of one object, mapped read-only from its file.

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;

use memmap2::Mmap;

use crate::hash::Digest;

/// An object's content, backed by a shared read-only mapping of its file
/// (or nothing, for the empty object, which cannot be mapped).
///
/// Cloning shares the mapping. The mapping stays valid after the file is
/// unlinked (by GC, say): on Linux an unlinked file lives on while mapped.
///
/// A blob may also be a slice of a larger shared mapping: a blob served out
/// of a bundle file is (`Blob::from_view`, defined beside the bundle reader).
#[derive(Clone)]
pub struct Blob {
    digest: Digest,
    map: Option<Arc<Mmap>>,
    range: Range<usize>,
}

impl Blob {
    pub(crate) fn new(digest: Digest, map: Option<Mmap>) -> Self {
        let len = map.as_ref().map_or(0, |m| m.len());
        Blob {
            digest,
            map: map.map(Arc::new),
            range: 0..len,
        }
    }

    /// A blob whose bytes are `range` of a mapping shared with other
    /// blobs (a bundle's, say); the mapping stays alive as long as any of
    /// them does. `digest` is trusted: check it before handing the blob out.
    pub(crate) fn from_shared(digest: Digest, map: Arc<Mmap>, range: Range<usize>) -> Self {
        Blob {
            digest,
            map: Some(map),
            range,
        }
    }

    /// The object's name.
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// The content.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.map {
            Some(map) => &map[self.range.clone()],
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
