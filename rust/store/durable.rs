//! Crash-safe file primitives: private tmp files, directory fsync, mtimes.
//!
//! Everything that becomes visible in the store is first written completely
//! to a uniquely named file in `tmp/` and fsynced; only then is it linked or
//! renamed into place, and the directory fsynced so the new entry survives a
//! crash. A reader can therefore never observe a partial object or ref.

use std::collections::hash_map::RandomState;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use crate::error::{Error, IoContext, Result};

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// fsyncs a directory, making the entries created or removed in it durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).at(dir)
}

/// A file in `tmp/` that only this thread knows about; unlinked on drop
/// unless it was renamed away.
#[derive(Debug)]
pub struct TmpFile {
    file: File,
    path: PathBuf,
    armed: bool,
}

impl TmpFile {
    /// Creates a new, empty tmp file in `dir`.
    ///
    /// The name combines pid, thread id, a process-wide counter and a random
    /// number, and creation uses O_EXCL, so two writers can never share a tmp
    /// file even across pid reuse after a crash. Objects are created 0444: a
    /// stored object is never written again, and a read-only mode keeps tools
    /// from editing one in place (which would corrupt live mappings).
    pub fn create(dir: &Path, mode: u32) -> Result<TmpFile> {
        let random = RandomState::new().build_hasher().finish();
        // SAFETY: gettid has no preconditions and cannot fail.
        let tid = unsafe { libc::gettid() };
        let name = format!(
            "{}-{}-{}-{:016x}.tmp",
            std::process::id(),
            tid,
            TMP_COUNTER.fetch_add(1, Ordering::Relaxed),
            random
        );
        let path = dir.join(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .at(&path)?;
        Ok(TmpFile {
            file,
            path,
            armed: true,
        })
    }

    /// Creates a tmp file holding `data`, already fsynced.
    pub fn write(dir: &Path, data: &[u8]) -> Result<TmpFile> {
        let mut tmp = TmpFile::create(dir, 0o444)?;
        tmp.file.write_all(data).at(&tmp.path)?;
        tmp.sync()?;
        Ok(tmp)
    }

    /// The open file.
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// fsyncs its data and size.
    pub fn sync(&self) -> Result<()> {
        self.file.sync_all().at(&self.path)
    }

    /// Links it at `dest` without ever replacing an existing file; false when
    /// `dest` already existed. The tmp name is still unlinked on drop.
    pub fn link_to(&self, dest: &Path) -> Result<bool> {
        match fs::hard_link(&self.path, dest) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(Error::io(dest, e)),
        }
    }

    /// Renames it over `dest` atomically (replacing what was there).
    pub fn rename_to(mut self, dest: &Path) -> Result<()> {
        fs::rename(&self.path, dest).at(dest)?;
        self.armed = false;
        Ok(())
    }
}

impl Drop for TmpFile {
    fn drop(&mut self) {
        if self.armed {
            // Best effort: a leftover is reclaimed by GC after the grace period.
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Sets a file's mtime (and atime) to now without opening it; false when the
/// file does not exist.
pub fn touch(path: &Path) -> Result<bool> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|e| Error::io(path, io::Error::new(io::ErrorKind::InvalidInput, e)))?;
    // SAFETY: `c` is a valid NUL-terminated path; a null `times` means "now".
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), std::ptr::null(), 0) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.kind() == io::ErrorKind::NotFound {
        Ok(false)
    } else {
        Err(Error::io(path, err))
    }
}

/// The mtime of a file's metadata, as a `SystemTime`.
pub fn mtime(meta: &fs::Metadata, path: &Path) -> Result<SystemTime> {
    meta.modified().at(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tmp_file_is_removed_unless_renamed() {
        let dir = tempfile::tempdir().unwrap();
        let a = TmpFile::write(dir.path(), b"a").unwrap();
        let pa = a.path().to_path_buf();
        let b = TmpFile::write(dir.path(), b"b").unwrap();
        assert_ne!(pa, b.path());
        drop(a);
        assert!(!pa.exists());
        b.rename_to(&dir.path().join("kept")).unwrap();
        assert_eq!(fs::read(dir.path().join("kept")).unwrap(), b"b");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn link_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("obj");
        let first = TmpFile::write(dir.path(), b"first").unwrap();
        let second = TmpFile::write(dir.path(), b"second").unwrap();
        assert!(first.link_to(&dest).unwrap());
        assert!(!second.link_to(&dest).unwrap());
        assert_eq!(fs::read(&dest).unwrap(), b"first");
    }

    #[test]
    fn touch_reports_missing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!touch(&dir.path().join("nope")).unwrap());
        fs::write(dir.path().join("f"), b"").unwrap();
        assert!(touch(&dir.path().join("f")).unwrap());
    }
}
