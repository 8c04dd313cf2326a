//! Opening a bundle: map it read-only, validate all metadata, and serve blobs zero-copy.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use super::format::{trailer_hash, Header, END_MAGIC, HEADER_LEN, TRAILER_LEN};
use super::index::Index;
use super::sign::{self, PublicKey, TrustedKeys};
use super::{format_error, io_error, missing_error, refs};
use crate::base::Blob;
use crate::error::Error;
use crate::hash::Digest;

/// An open, validated bundle.
///
/// Cloning is cheap (one `Arc`), and clones share the mapping. Blob bytes are served straight
/// from the mapping; they are covered by their digests, not checked at open, so call
/// [`verify_blob`](Self::verify_blob) or [`verify_all`](Self::verify_all) before trusting
/// bytes from an untrusted source.
#[derive(Clone)]
pub struct Bundle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Bundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The index and mapping are large and opaque; summarize instead.
        f.debug_struct("Bundle")
            .field("path", &self.inner.path)
            .field("blobs", &self.len())
            .field("refs", &self.inner.refs.len())
            .field("bytes", &self.file_len())
            .finish()
    }
}

pub(crate) struct Inner {
    pub path: PathBuf,
    pub map: Arc<Mmap>,
    pub index: Index,
    pub refs: Vec<(String, [u8; 32])>,
    pub signer: Option<PublicKey>,
}

impl Bundle {
    /// Maps the bundle at `path` read-only and validates every metadata field: header,
    /// section layout, trailer hash, fan-out, digest order, blob bounds and alignment, and
    /// refs. Any inconsistency is `Error::Format`, and nothing of a malformed bundle is used.
    ///
    /// Like every mmap-based reader, this relies on the file not being modified while it is
    /// mapped. Bundles are written to a temporary file and renamed into place, never changed
    /// in place, so this holds unless another program truncates or rewrites the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Bundle, Error> {
        Self::open_trusted(path, None)
    }

    /// [`open`](Self::open), refusing with `Error::Untrusted` a bundle that `trust` does not
    /// accept: unsigned, signed by a key not in it, or changed after signing.
    ///
    /// The signature is checked as soon as the header has proved that the sections lie
    /// inside the file, before the index or the refs are parsed and before any blob is
    /// handed out. A signature that is present is always checked, with or without `trust`.
    pub fn open_trusted(
        path: impl AsRef<Path>,
        trust: Option<&TrustedKeys>,
    ) -> Result<Bundle, Error> {
        let path = path.as_ref().to_path_buf();
        // Not File::open: a FIFO would block the open forever, and a device
        // (`/dev/zero`) would map endless bytes. Regular files only.
        let file = crate::base::open_regular(&path)?;
        let file_len = file.metadata().map_err(|e| io_error(&path, e))?.len();
        // Too short for header + trailer; checked before mapping since an empty file
        // cannot be mapped at all.
        if file_len < (HEADER_LEN + TRAILER_LEN) as u64 {
            return Err(format_error(format!(
                "file is {file_len} bytes, too short to be a bundle"
            )));
        }
        // SAFETY: the mapping is read-only and bundles are immutable once renamed into place
        // (see above); all reads below go through bounds that are checked against the
        // mapping's own length, so a file that changed size since `metadata` cannot make
        // them go out of range.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| io_error(&path, e))?;
        let inner = validate(path, map, trust)?;
        Ok(Bundle {
            inner: Arc::new(inner),
        })
    }

    /// Path the bundle was opened from.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Size of the bundle file in bytes.
    pub fn file_len(&self) -> u64 {
        self.inner.map.len() as u64
    }

    /// Number of blobs.
    pub fn len(&self) -> usize {
        self.inner.index.len()
    }

    /// Whether the bundle holds no blobs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the bundle holds a blob with this digest.
    pub fn contains(&self, digest: &[u8; 32]) -> bool {
        self.inner.index.find(&self.inner.map, digest).is_some()
    }

    /// The bytes of the blob with this digest, straight from the mapping (not re-hashed).
    pub fn get(&self, digest: &[u8; 32]) -> Option<&[u8]> {
        let (offset, len) = self.locate(digest)?;
        Some(&self.inner.map[offset..offset + len])
    }

    /// Like [`get`](Self::get), but a missing blob is `Error::Missing`.
    pub fn blob(&self, digest: &[u8; 32]) -> Result<&[u8], Error> {
        self.get(digest).ok_or_else(|| missing_error(digest))
    }

    /// The (file offset, length) of a blob inside [`mmap`](Self::mmap).
    pub fn locate(&self, digest: &[u8; 32]) -> Option<(usize, usize)> {
        let i = self.inner.index.find(&self.inner.map, digest)?;
        Some(self.inner.index.entry(&self.inner.map, i))
    }

    /// An owned, zero-copy handle on a blob that keeps the mapping alive on its own, for
    /// handing a buffer to Python without tying it to the `Bundle`'s lifetime.
    pub fn view(&self, digest: &[u8; 32]) -> Option<BlobView> {
        let (offset, len) = self.locate(digest)?;
        Some(BlobView {
            map: Arc::clone(&self.inner.map),
            offset,
            len,
        })
    }

    /// The whole read-only mapping of the bundle file.
    pub fn mmap(&self) -> &Arc<Mmap> {
        &self.inner.map
    }

    /// All blob digests, in increasing order.
    pub fn digests(&self) -> impl ExactSizeIterator<Item = &[u8; 32]> + '_ {
        let map: &[u8] = &self.inner.map;
        (0..self.len()).map(move |i| self.inner.index.digest(map, i))
    }

    /// The key whose valid signature the bundle carries, or `None` if it is unsigned.
    pub fn signer(&self) -> Option<&PublicKey> {
        self.inner.signer.as_ref()
    }

    /// All refs as (name, digest), sorted by name.
    pub fn refs(&self) -> &[(String, [u8; 32])] {
        &self.inner.refs
    }

    /// The digest a ref names, found by binary search.
    pub fn get_ref(&self, name: &str) -> Option<&[u8; 32]> {
        refs::find(&self.inner.refs, name)
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.inner
    }
}

/// A blob's bytes inside a shared mapping: `Send + Sync`, cheap to clone, and valid for as
/// long as it lives, independent of the [`Bundle`] it came from.
#[derive(Clone, Debug)]
pub struct BlobView {
    map: Arc<Mmap>,
    offset: usize,
    len: usize,
}

impl BlobView {
    /// The blob's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.map[self.offset..self.offset + self.len]
    }

    /// The blob's offset in the bundle file (and in [`mmap`](Self::mmap)).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The blob's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the blob is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapping the bytes live in.
    pub fn mmap(&self) -> &Arc<Mmap> {
        &self.map
    }
}

impl Deref for BlobView {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<[u8]> for BlobView {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Blob {
    /// A blob whose bytes are `view`'s slice of a bundle mapping; the
    /// mapping stays alive as long as any blob or view of it does.
    /// `digest` is trusted: check it before handing the blob out.
    pub fn from_view(digest: Digest, view: BlobView) -> Self {
        let range = view.offset..view.offset + view.len;
        Blob::from_shared(digest, view.map, range)
    }
}

/// Checks everything outside the data region; the order is cheapest-first, and each step
/// only relies on what the steps before it established.
fn validate(path: PathBuf, map: Mmap, trust: Option<&TrustedKeys>) -> Result<Inner, Error> {
    let file_len = map.len();
    if file_len < HEADER_LEN + TRAILER_LEN {
        return Err(format_error(format!(
            "file is {file_len} bytes, too short to be a bundle"
        )));
    }
    let header_bytes: &[u8; HEADER_LEN] = map[..HEADER_LEN].try_into().expect("header slice");
    let header = Header::decode(header_bytes)?;
    let trailer = &map[file_len - TRAILER_LEN..];
    if trailer[32..] != END_MAGIC {
        return Err(format_error(
            "missing end magic: the bundle is truncated or not finished",
        ));
    }
    header.check_layout(file_len as u64)?;
    // check_layout() proved index_offset..sig_end is exactly index + refs + signature.
    let sig_start = file_len - TRAILER_LEN - header.sig_len as usize;
    let index_and_refs = &map[header.index_offset as usize..sig_start];
    let digest = trailer_hash(header_bytes, index_and_refs);
    // Authorship before integrity: a tampered bundle whose trailer was recomputed is
    // refused here as untrusted, and nothing below runs on bytes nobody vouched for.
    let signer = match header.sig_len {
        0 => None,
        _ => Some(sign::verify_section(
            &map[sig_start..file_len - TRAILER_LEN],
            &digest,
            &path,
        )?),
    };
    if let Some(trust) = trust {
        trust.check(signer.as_ref(), &path)?;
    }
    if digest != trailer[..32] {
        return Err(format_error(
            "trailer hash mismatch: bundle metadata is corrupt",
        ));
    }
    let index = Index::validate(&map, &header)?;
    let refs_table = &map[header.refs_offset as usize..sig_start];
    let refs = refs::parse(refs_table, header.ref_count, |d| {
        index.find(&map, d).is_some()
    })?;
    Ok(Inner {
        path,
        map: Arc::new(map),
        index,
        refs,
        signer,
    })
}
