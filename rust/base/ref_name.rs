//! Ref names: the one set of rules for the names a store's refs and a bundle's refs carry,
//! so that any ref a bundle holds can be set in a store when it is unpacked.

use crate::error::{Error, Result};

/// Longest ref name, in bytes (a common filename limit).
pub const MAX_NAME_LEN: usize = 255;

/// Checks a ref name: non-empty, at most [`MAX_NAME_LEN`] bytes, relative,
/// '/'-separated components that are non-empty and do not start with '.'
/// (which rules out `.` and `..`), no backslash, and no control character
/// (C0, DEL, C1: names are printed by `ls`/`show`/`du`, and an escape
/// sequence in one would drive the user's terminal).
pub fn validate_name(name: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::InvalidName(format!("{name:?}: {why}")));
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("longer than 255 bytes");
    }
    if name.contains('\0') {
        return bad("contains NUL");
    }
    if name.chars().any(char::is_control) {
        return bad("contains a control character");
    }
    if name.contains('\\') {
        return bad("contains a backslash");
    }
    if name.starts_with('/') {
        return bad("absolute");
    }
    for component in name.split('/') {
        if component.is_empty() {
            return bad("empty path component");
        }
        if component == ".." {
            return bad("contains '..'");
        }
        if component.starts_with('.') {
            return bad("a component starts with '.'");
        }
    }
    Ok(())
}
