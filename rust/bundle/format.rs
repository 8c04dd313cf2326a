//! The on-disk layout of a bundle file, format versions 1 (unsigned) and 2 (signed).
//!
//! A bundle is one file holding a set of blobs (content-addressed by their blake3 digest)
//! and a set of named refs into them. It is written once, renamed into place, and never
//! modified, so a reader can map it read-only and hand out slices of it without copying.
//!
//! ```text
//! file offset       size         section
//! ---------------------------------------------------------------------------
//! 0                 128          header
//! data_offset       data_len     data region: raw blob bytes, each blob aligned
//! index_offset      index_len    digest index
//! refs_offset       refs_len     refs table
//! sig_offset        sig_len      signature section (version 2 only; see `sign.rs`)
//! file_len - 40     40           trailer
//! ```
//!
//! The sections are contiguous and in this order (`data_offset` >= 128,
//! `index_offset == data_offset + data_len`, `refs_offset == index_offset + index_len`,
//! `sig_offset == refs_offset + refs_len`, `file_len == sig_offset + sig_len + 40`), so there is no slack in the file that is
//! neither hashed nor covered by a blob digest. The data region comes first because the
//! writer streams blobs before it knows the index.
//!
//! All integers are little-endian.
//!
//! ```text
//! Header (128 bytes)
//!   0   [u8; 8]  magic          b"PCBUNDLE"
//!   8   u32      version        1, or 2 for a signed bundle
//!   12  u32      flags          0; no flag is defined and a reader rejects any set bit
//!   16  u32      page_align     4096; a blob of at least this many bytes starts at a multiple of it
//!   20  u32      min_align      64; every other blob starts at a multiple of it
//!   24  u64      blob_count     N
//!   32  u64      ref_count      R
//!   40  u64      data_offset
//!   48  u64      data_len
//!   56  u64      index_offset
//!   64  u64      index_len      must equal 256*8 + N*32 + N*16
//!   72  u64      refs_offset
//!   80  u64      refs_len
//!   88  u64      sig_offset     version 2: offset of the signature section; version 1: zero
//!   96  u64      sig_len        version 2: its length (112 for ed25519); version 1: zero
//!   104 [u8; 24] reserved       zero
//!
//! Index (like a git pack .idx v2)
//!   fanout   256 x u64          fanout[b] = number of digests whose first byte is <= b;
//!                               non-decreasing, fanout[255] == N
//!   digests  N x [u8; 32]       strictly increasing (so no digest appears twice)
//!   entries  N x (u64, u64)     (offset, len) of the blob named by digests[i]; offset is an
//!                               absolute file offset inside the data region, aligned as above
//!
//! Refs table
//!   u64                         count, == R
//!   R x { u16 name_len, [u8; name_len] name (UTF-8), [u8; 32] digest }
//!                               sorted strictly by name bytes; each name is a valid ref name
//!                               and each digest is in the index
//!
//! Signature section (version 2): see `sign.rs`. It signs blake3(header || index || refs
//!   table), the same digest the trailer holds, so it covers every blob by digest.
//!
//! Trailer (40 bytes)
//!   [u8; 32]  blake3(header || index || refs table)
//!   [u8; 8]   b"PCBEND\0\0"
//! ```
//!
//! Alignment: blobs of at least `page_align` bytes are page-aligned so they can be handed out
//! zero-copy, madvised page by page, and (for tensors and kernels) used in place with any
//! alignment a consumer needs. Smaller blobs are packed at 64 bytes: a precompile output holds
//! many small files (guards, metadata, source), and a page each would inflate a bundle by
//! up to 4 KiB per blob, while 64 still gives cache-line and SIMD alignment. A small blob
//! spans at most two pages, so prefetching it costs at most one extra page.
//!
//! Integrity: the trailer hash covers everything except the data region, so any flipped byte
//! in the metadata is caught at open. Blob bytes are covered by their own digests and checked
//! by `verify_blob`/`verify_all`, not at open, so opening a large bundle stays O(metadata).
//!
//! Versions: a writer writes version 1 for an unsigned bundle, byte for byte what earlier
//! builds wrote, so they still read it; version 2 only when it signs. A reader reads both
//! and refuses any other version.

use super::format_error;
use crate::error::Error;

/// Magic bytes at the start of every bundle.
pub const MAGIC: [u8; 8] = *b"PCBUNDLE";
/// Magic bytes at the very end of every bundle.
pub const END_MAGIC: [u8; 8] = *b"PCBEND\0\0";
/// The format version of an unsigned bundle.
pub const VERSION: u32 = 1;
/// The format version of a signed bundle: version 1 plus a signature section.
pub const VERSION_SIGNED: u32 = 2;
/// Size of the fixed header.
pub const HEADER_LEN: usize = 128;
/// Size of the trailer: a blake3 hash plus [`END_MAGIC`].
pub const TRAILER_LEN: usize = 40;
/// Magic bytes at the start of the signature section.
pub const SIGNATURE_MAGIC: [u8; 8] = *b"PCBSIG\0\0";
/// The only signature scheme defined: ed25519.
pub const SCHEME_ED25519: u32 = 1;
/// Size of the signature section.
pub const SIGNATURE_LEN: usize = 8 + 4 + 4 + 32 + 64;
/// Alignment the writer uses for blobs of at least this many bytes.
pub const PAGE_ALIGN: u32 = 4096;
/// Alignment the writer uses for all other blobs.
pub const MIN_ALIGN: u32 = 64;

/// Size of the fan-out table at the start of the index.
pub(crate) const FANOUT_LEN: u64 = 256 * 8;
/// Bytes per blob in the index: a digest plus an (offset, len) pair.
pub(crate) const INDEX_ENTRY_LEN: u64 = 32 + 16;
/// Smallest possible refs-table entry: u16 length, a one-byte name, a digest.
pub(crate) const MIN_REF_ENTRY_LEN: u64 = 2 + 1 + 32;

// Largest alignment a reader accepts; anything above is nonsense that would only waste space.
const MAX_ALIGN: u32 = 1 << 30;

/// The decoded fixed header. Built from untrusted bytes by [`Header::decode`]; its layout
/// fields may be used only after [`Header::check_layout`] has passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub page_align: u32,
    pub min_align: u32,
    pub blob_count: u64,
    pub ref_count: u64,
    pub data_offset: u64,
    pub data_len: u64,
    pub index_offset: u64,
    pub index_len: u64,
    pub refs_offset: u64,
    pub refs_len: u64,
    /// Zero in an unsigned (version 1) bundle.
    pub sig_offset: u64,
    pub sig_len: u64,
}

impl Header {
    /// Serializes the header: version 2 when it has a signature section, else version 1.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..8].copy_from_slice(&MAGIC);
        let version = if self.sig_len == 0 {
            VERSION
        } else {
            VERSION_SIGNED
        };
        out[8..12].copy_from_slice(&version.to_le_bytes());
        out[12..16].copy_from_slice(&0u32.to_le_bytes());
        out[16..20].copy_from_slice(&self.page_align.to_le_bytes());
        out[20..24].copy_from_slice(&self.min_align.to_le_bytes());
        let words = [
            self.blob_count,
            self.ref_count,
            self.data_offset,
            self.data_len,
            self.index_offset,
            self.index_len,
            self.refs_offset,
            self.refs_len,
            self.sig_offset,
            self.sig_len,
        ];
        for (i, w) in words.iter().enumerate() {
            out[24 + 8 * i..32 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Parses a header and checks its identity fields: magic, version, flags, reserved bytes.
    /// The layout fields are checked by [`check_layout`](Self::check_layout).
    pub fn decode(bytes: &[u8; HEADER_LEN]) -> Result<Header, Error> {
        if bytes[0..8] != MAGIC {
            return Err(format_error("bad magic: not a bundle file"));
        }
        let version = read_u32(bytes, 8);
        if version != VERSION && version != VERSION_SIGNED {
            return Err(format_error(format!(
                "unsupported bundle format version {version} (this build reads versions {VERSION} and {VERSION_SIGNED})"
            )));
        }
        let flags = read_u32(bytes, 12);
        if flags != 0 {
            return Err(format_error(format!("unknown header flags {flags:#x}")));
        }
        let reserved_from = if version == VERSION { 88 } else { 104 };
        if bytes[reserved_from..].iter().any(|&b| b != 0) {
            return Err(format_error("reserved header bytes are not zero"));
        }
        let (sig_offset, sig_len) = if version == VERSION {
            (0, 0)
        } else {
            (read_u64(bytes, 88), read_u64(bytes, 96))
        };
        if version == VERSION_SIGNED && sig_len != SIGNATURE_LEN as u64 {
            return Err(format_error(format!(
                "bad signature section length {sig_len}"
            )));
        }
        Ok(Header {
            page_align: read_u32(bytes, 16),
            min_align: read_u32(bytes, 20),
            blob_count: read_u64(bytes, 24),
            ref_count: read_u64(bytes, 32),
            data_offset: read_u64(bytes, 40),
            data_len: read_u64(bytes, 48),
            index_offset: read_u64(bytes, 56),
            index_len: read_u64(bytes, 64),
            refs_offset: read_u64(bytes, 72),
            refs_len: read_u64(bytes, 80),
            sig_offset,
            sig_len,
        })
    }

    /// Checks the layout fields against the length of the file the header came from.
    ///
    /// Every field is checked here, with overflow-checked arithmetic, before any of them is
    /// used to index the file: a forged count or offset yields `Error::Format`, never a
    /// huge allocation, a long loop, or an out-of-bounds slice.
    pub fn check_layout(&self, file_len: u64) -> Result<(), Error> {
        let pow2 = |a: u32| a.is_power_of_two() && a <= MAX_ALIGN;
        if !pow2(self.page_align) || !pow2(self.min_align) || self.min_align > self.page_align {
            return Err(format_error(format!(
                "bad alignment: page_align {} min_align {}",
                self.page_align, self.min_align
            )));
        }
        if self.data_offset < HEADER_LEN as u64 || self.data_offset % u64::from(self.min_align) != 0
        {
            return Err(format_error(format!(
                "bad data offset {}",
                self.data_offset
            )));
        }
        let expect_index_len = index_len(self.blob_count)
            .ok_or_else(|| format_error(format!("blob count {} is too large", self.blob_count)))?;
        if self.index_len != expect_index_len {
            return Err(format_error(format!(
                "index length {} does not match blob count {}",
                self.index_len, self.blob_count
            )));
        }
        let data_end = self.data_offset.checked_add(self.data_len);
        let index_end = self.index_offset.checked_add(self.index_len);
        let refs_end = self.refs_offset.checked_add(self.refs_len);
        let sig_offset = if self.sig_len == 0 {
            refs_end
        } else {
            Some(self.sig_offset)
        };
        let sig_end = sig_offset.and_then(|o| o.checked_add(self.sig_len));
        let file_end = sig_end.and_then(|e| e.checked_add(TRAILER_LEN as u64));
        if data_end != Some(self.index_offset)
            || index_end != Some(self.refs_offset)
            || sig_offset != refs_end
            || file_end != Some(file_len)
        {
            return Err(format_error(format!(
                "sections do not tile the file ({file_len} bytes): data {}+{}, index {}+{}, refs {}+{}, signature {}+{}",
                self.data_offset,
                self.data_len,
                self.index_offset,
                self.index_len,
                self.refs_offset,
                self.refs_len,
                self.sig_offset,
                self.sig_len
            )));
        }
        // The refs table is at least its count prefix plus R minimal entries; checking it here
        // bounds R by the file size before anything is sized by it.
        let min_refs_len = self
            .ref_count
            .checked_mul(MIN_REF_ENTRY_LEN)
            .and_then(|n| n.checked_add(8));
        if min_refs_len.is_none_or(|n| n > self.refs_len) {
            return Err(format_error(format!(
                "ref count {} does not fit in a {}-byte refs table",
                self.ref_count, self.refs_len
            )));
        }
        Ok(())
    }

    /// The alignment a blob of `len` bytes must have under this header.
    pub fn align_for(&self, len: u64) -> u64 {
        align_for(len, self.page_align, self.min_align)
    }
}

/// Length of an index holding `blob_count` entries, or `None` if it overflows a u64.
pub(crate) fn index_len(blob_count: u64) -> Option<u64> {
    blob_count
        .checked_mul(INDEX_ENTRY_LEN)?
        .checked_add(FANOUT_LEN)
}

/// Alignment for a blob of `len` bytes: page-aligned if it is at least a page long.
pub(crate) fn align_for(len: u64, page_align: u32, min_align: u32) -> u64 {
    if len >= u64::from(page_align) {
        u64::from(page_align)
    } else {
        u64::from(min_align)
    }
}

/// Reads a little-endian u32 at `at`; the caller guarantees the bounds.
pub(crate) fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4-byte slice"))
}

/// Reads a little-endian u64 at `at`; the caller guarantees the bounds.
pub(crate) fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8-byte slice"))
}

/// The trailer hash: blake3 over the header and the contiguous index + refs bytes.
pub(crate) fn trailer_hash(header: &[u8], index_and_refs: &[u8]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(header);
    hasher.update(index_and_refs);
    *hasher.finalize().as_bytes()
}
