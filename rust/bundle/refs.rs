//! Ref names and the refs table: named entry points into the bundle's blobs.

use std::collections::BTreeMap;

use super::format::MIN_REF_ENTRY_LEN;
use super::{format_error, hex};
use crate::error::Error;

/// Longest ref name, in bytes; the store's limit, which also keeps names within the
/// table's u16 length field.
pub const MAX_REF_NAME_LEN: usize = crate::base::ref_name::MAX_NAME_LEN;

/// Checks that `name` is a valid ref name: the store's rules, so that any ref a bundle
/// carries can be set in a store when the bundle is unpacked (non-empty, at most 255 bytes,
/// relative, `/`-separated components that are non-empty and do not start with `.`, no NUL
/// or backslash). Fails with `Error::InvalidName`.
pub fn validate_ref_name(name: &str) -> Result<(), Error> {
    crate::base::ref_name::validate_name(name)
}

/// Serializes the refs table; a `BTreeMap` already iterates in name-byte order.
pub(crate) fn encode(refs: &BTreeMap<String, [u8; 32]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + refs.len() * 64);
    out.extend_from_slice(&(refs.len() as u64).to_le_bytes());
    for (name, digest) in refs {
        // Names were validated on add, so they fit in a u16.
        out.extend_from_slice(&(name.len() as u16).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(digest);
    }
    out
}

/// Parses and checks a refs table of `count` entries that must fill `table` exactly.
///
/// `has_blob` answers whether a digest is in the bundle's index; a ref to a blob the bundle
/// does not hold is a malformed bundle, since shipping the ref without its target is useless.
pub(crate) fn parse(
    table: &[u8],
    count: u64,
    has_blob: impl Fn(&[u8; 32]) -> bool,
) -> Result<Vec<(String, [u8; 32])>, Error> {
    let mut cursor = Cursor {
        bytes: table,
        at: 0,
    };
    let prefix = u64::from_le_bytes(cursor.take(8)?.try_into().expect("8 bytes"));
    if prefix != count {
        return Err(format_error(format!(
            "refs table holds {prefix} refs, header says {count}"
        )));
    }
    // Header::decode bounded count by the table size, but capacity is still clamped to what
    // the bytes could hold so that no header can make this allocate more than the file.
    let fits = (table.len() as u64 / MIN_REF_ENTRY_LEN) as usize;
    let mut refs: Vec<(String, [u8; 32])> = Vec::with_capacity((count as usize).min(fits));
    for _ in 0..count {
        let len = u16::from_le_bytes(cursor.take(2)?.try_into().expect("2 bytes"));
        let name = std::str::from_utf8(cursor.take(usize::from(len))?)
            .map_err(|_| format_error("ref name is not UTF-8"))?;
        validate_ref_name(name).map_err(|_| format_error(format!("invalid ref name {name:?}")))?;
        let digest: [u8; 32] = cursor.take(32)?.try_into().expect("32 bytes");
        if let Some((last, _)) = refs.last() {
            if last.as_bytes() >= name.as_bytes() {
                return Err(format_error(format!(
                    "refs are not strictly sorted at {name:?}"
                )));
            }
        }
        if !has_blob(&digest) {
            return Err(format_error(format!(
                "ref {name:?} points at {}, which is not in the bundle",
                hex(&digest)
            )));
        }
        refs.push((name.to_owned(), digest));
    }
    if cursor.at != table.len() {
        return Err(format_error("trailing bytes after the refs table"));
    }
    Ok(refs)
}

/// Binary search for `name` in refs sorted by name bytes.
pub(crate) fn find<'r>(refs: &'r [(String, [u8; 32])], name: &str) -> Option<&'r [u8; 32]> {
    refs.binary_search_by(|(n, _)| n.as_bytes().cmp(name.as_bytes()))
        .ok()
        .map(|i| &refs[i].1)
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| format_error("refs table is truncated"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
}
