//! Opening a file a caller named, refusing anything but a regular file.

use std::fs::File;
use std::io;
use std::path::Path;

use rustix::fs::OFlags;

use crate::error::{Error, IoContext, Result};

/// Opens a file the caller named, following links (the caller's choice of
/// path), without blocking, and refuses anything but a regular file.
pub(crate) fn open_regular(path: &Path) -> Result<File> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| Error::io(path, e.into()))?;
    let file = File::from(fd);
    let meta = file.metadata().at(path)?;
    if !meta.is_file() {
        let kind = if meta.is_dir() {
            "a directory"
        } else if std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type()) {
            "a FIFO"
        } else if std::os::unix::fs::FileTypeExt::is_char_device(&meta.file_type())
            || std::os::unix::fs::FileTypeExt::is_block_device(&meta.file_type())
        {
            "a device"
        } else {
            "not a regular file"
        };
        let error_kind = if meta.is_dir() {
            io::ErrorKind::IsADirectory
        } else {
            io::ErrorKind::InvalidInput
        };
        return Err(Error::io(
            path,
            io::Error::new(
                error_kind,
                format!("{kind}: only regular files can be stored or opened"),
            ),
        ));
    }
    Ok(file)
}
