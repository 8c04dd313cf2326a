//! Objects on disk: where the object named by a digest lives beneath `objects/`, opening it
//! without following a link, and what a put expects to find there.

use std::fs::File;
use std::io;

use rustix::fs::OFlags;

use crate::base::beneath::Dir;
use crate::hash::Digest;

/// The fan-out directory name and file name of an object.
pub(crate) fn object_names(digest: &Digest) -> (String, String) {
    let hex = digest.to_hex();
    (hex[..2].to_owned(), hex[2..].to_owned())
}

/// `<2 hex>/<62 hex>`, relative to `objects/`.
pub(crate) fn object_rel(digest: &Digest) -> String {
    let hex = digest.to_hex();
    format!("{}/{}", &hex[..2], &hex[2..])
}

/// What is at an object's path.
pub(crate) enum Existing {
    /// Nothing.
    Absent,
    /// A regular file of the right size whose content hashes to its name.
    Good(File),
    /// Something else: a wrong size or content, a symlink (dangling or
    /// not), a directory, a FIFO. A put replaces it.
    Damaged { directory: bool },
}

/// What a put knows of the content it is about to store, to check an
/// object already at its path against.
#[derive(Clone, Copy)]
pub(crate) enum Expect<'a> {
    /// Nothing: the object is hashed.
    Unknown,
    /// Its length: checked first; then the object is hashed.
    Len(u64),
    /// The bytes themselves: compared directly, which is exact and faster
    /// than hashing.
    Bytes(&'a [u8]),
}

/// What opening an object's path found.
pub(crate) enum Opened {
    /// Nothing there.
    Absent,
    /// A symlink (dangling or not) at the object path, or in its fan-out
    /// directory's place, or a FIFO without a writer: never a sound object.
    Link,
    /// Something opened (a regular file, or a directory: the caller checks).
    File(File),
}

/// Opens what is at the path of the object named `digest` beneath `objects`,
/// following no link and never blocking; any other failure is returned as is.
pub(crate) fn open_object_at(objects: &Dir, digest: &Digest) -> io::Result<Opened> {
    match objects.open(&object_rel(digest), OFlags::RDONLY | OFlags::NONBLOCK, 0) {
        Ok(file) => Ok(Opened::File(file)),
        Err(e) => match e.raw_os_error() {
            Some(libc::ENOENT) => Ok(Opened::Absent),
            Some(libc::ELOOP) | Some(libc::ENOTDIR) | Some(libc::ENXIO) => Ok(Opened::Link),
            _ => Err(e),
        },
    }
}
