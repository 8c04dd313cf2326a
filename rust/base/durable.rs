//! Crash-safe file primitives: private tmp files, directory fsync, mtimes.
//!
//! Everything that becomes visible in the store is first written completely
//! to a randomly named file in `tmp/` and fsynced; only then is it linked or
//! renamed into place, and the directory fsynced so the new entry survives a
//! crash. A reader can therefore never observe a partial object or ref.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rustix::fs::{self as rfs, AtFlags, OFlags, Timestamps};

use crate::base::beneath::Dir;
use crate::error::{Error, IoContext, Result};

/// fsyncs a directory, making the entries created or removed in it durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).at(dir)
}

/// 128 random bits in hex: temporary names nobody can guess or pre-create.
pub fn random_name() -> String {
    let mut bytes = [0u8; 16];
    let filled = rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty());
    if filled.ok() != Some(bytes.len()) {
        // getrandom cannot fail for 16 bytes on Linux once the pool is up;
        // should it, fall back to per-process randomness mixed with time.
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        bytes[..8].copy_from_slice(&h.finish().to_le_bytes());
        bytes[8..].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A file in `tmp/` that only this thread knows about; unlinked on drop
/// unless it was renamed away.
#[derive(Debug)]
pub struct TmpFile {
    file: File,
    dir: Dir,
    name: String,
    armed: bool,
}

impl TmpFile {
    /// Creates a new, empty tmp file in `dir`.
    ///
    /// The name is 128 random bits (`<32 hex>.tmp`) and creation uses
    /// O_EXCL | O_NOFOLLOW, so two writers never share a tmp file, a name
    /// cannot be predicted and planted, and pid reuse (pid namespaces, a
    /// crashed writer) cannot collide. Objects are created 0444: a stored
    /// object is never written again, and a read-only mode keeps tools from
    /// editing one in place (which would corrupt live mappings).
    pub fn create(dir: &Dir, mode: u32) -> Result<TmpFile> {
        let name = format!("{}.tmp", random_name());
        let file = dir
            .open(&name, OFlags::RDWR | OFlags::CREATE | OFlags::EXCL, mode)
            .map_err(|e| Error::io(dir.path().join(&name), e))?;
        Ok(TmpFile {
            file,
            dir: dir.clone(),
            name,
            armed: true,
        })
    }

    /// Creates a tmp file holding `data`, already fsynced.
    pub fn write(dir: &Dir, data: &[u8]) -> Result<TmpFile> {
        let mut tmp = TmpFile::create(dir, 0o444)?;
        tmp.file.write_all(data).at(&tmp.path())?;
        tmp.sync()?;
        Ok(tmp)
    }

    /// The open file.
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// Where it is (for messages).
    pub fn path(&self) -> PathBuf {
        self.dir.path().join(&self.name)
    }

    /// fsyncs its data and size.
    pub fn sync(&self) -> Result<()> {
        self.file.sync_all().at(&self.path())
    }

    /// Links it as `name` in `dest` without ever replacing an existing entry;
    /// false when one already existed. The tmp name is still unlinked on drop.
    pub fn link_to(&self, dest: &Dir, name: &str) -> Result<bool> {
        match rfs::linkat(
            self.dir.fd(),
            self.name.as_str(),
            dest.fd(),
            name,
            AtFlags::empty(),
        ) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::EXIST) => Ok(false),
            Err(e) => Err(Error::io(dest.path().join(name), e.into())),
        }
    }

    /// Renames it over `name` in `dest` atomically (replacing a file or a
    /// symlink there, never following it).
    pub fn rename_to(mut self, dest: &Dir, name: &str) -> Result<()> {
        rfs::renameat(self.dir.fd(), self.name.as_str(), dest.fd(), name)
            .map_err(|e| Error::io(dest.path().join(name), e.into()))?;
        self.armed = false;
        Ok(())
    }
}

impl Drop for TmpFile {
    fn drop(&mut self) {
        if self.armed {
            // Best effort: a leftover is reclaimed by GC after the grace period.
            let _ = rfs::unlinkat(self.dir.fd(), self.name.as_str(), AtFlags::empty());
        }
    }
}

/// Sets the mtime (and atime) of an open file to now. Needs ownership of the
/// file or write access to it.
pub fn touch_fd(file: &File) -> io::Result<()> {
    let now = rustix::fs::Timespec {
        tv_sec: 0,
        tv_nsec: rfs::UTIME_NOW,
    };
    rfs::futimens(
        file,
        &Timestamps {
            last_access: now,
            last_modification: now,
        },
    )?;
    Ok(())
}

/// Sets the mtime of the entry `name` in `dir` to now, without following a
/// symlink there; false when it does not exist.
pub fn touch_at(dir: &Dir, name: &str) -> Result<bool> {
    let now = rustix::fs::Timespec {
        tv_sec: 0,
        tv_nsec: rfs::UTIME_NOW,
    };
    let times = Timestamps {
        last_access: now,
        last_modification: now,
    };
    match rfs::utimensat(dir.fd(), name, &times, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::NOENT) => Ok(false),
        Err(e) => Err(Error::io(dir.path().join(name), e.into())),
    }
}

/// The mtime of a file's metadata, as a `SystemTime`.
pub fn mtime(meta: &fs::Metadata, path: &Path) -> Result<SystemTime> {
    meta.modified().at(path)
}

/// Opens `name` in `dir` without following a link, for reading.
pub fn open_nofollow(dir: &Dir, name: &str) -> io::Result<File> {
    dir.open(name, OFlags::RDONLY, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(p: &Path) -> Dir {
        Dir::open_root(p).unwrap()
    }

    #[test]
    fn tmp_file_is_removed_unless_renamed() {
        let tmpdir = tempfile::tempdir().unwrap();
        let d = dir(tmpdir.path());
        let a = TmpFile::write(&d, b"a").unwrap();
        let pa = a.path();
        let b = TmpFile::write(&d, b"b").unwrap();
        assert_ne!(pa, b.path());
        drop(a);
        assert!(!pa.exists());
        b.rename_to(&d, "kept").unwrap();
        assert_eq!(fs::read(tmpdir.path().join("kept")).unwrap(), b"b");
        assert_eq!(fs::read_dir(tmpdir.path()).unwrap().count(), 1);
    }

    #[test]
    fn link_never_replaces() {
        let tmpdir = tempfile::tempdir().unwrap();
        let d = dir(tmpdir.path());
        let first = TmpFile::write(&d, b"first").unwrap();
        let second = TmpFile::write(&d, b"second").unwrap();
        assert!(first.link_to(&d, "obj").unwrap());
        assert!(!second.link_to(&d, "obj").unwrap());
        assert_eq!(fs::read(tmpdir.path().join("obj")).unwrap(), b"first");
    }

    #[test]
    fn touch_reports_missing_and_never_follows() {
        let tmpdir = tempfile::tempdir().unwrap();
        let d = dir(tmpdir.path());
        assert!(!touch_at(&d, "nope").unwrap());
        fs::write(tmpdir.path().join("f"), b"").unwrap();
        assert!(touch_at(&d, "f").unwrap());
        let target = tmpdir.path().join("target");
        fs::write(&target, b"").unwrap();
        let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        File::options()
            .write(true)
            .open(&target)
            .unwrap()
            .set_modified(old)
            .unwrap();
        std::os::unix::fs::symlink(&target, tmpdir.path().join("link")).unwrap();
        touch_at(&d, "link").unwrap();
        assert_eq!(fs::metadata(&target).unwrap().modified().unwrap(), old);
    }

    #[test]
    fn random_names_differ() {
        let a = random_name();
        assert_eq!(a.len(), 32);
        assert_ne!(a, random_name());
    }
}
