//! File access confined to the store: every path is resolved relative to a
//! directory descriptor, and no symlink on the way is ever followed.
//!
//! Why: a store directory may be shared, restored from a backup, or planted
//! by someone else. A symlink at `tmp/`, at a ref namespace, at `locks/` or at
//! an object path would otherwise make GC delete, `set_ref` write and a dedup
//! put touch files outside the store. Directories are opened once with
//! `O_NOFOLLOW | O_DIRECTORY`; multi-component paths go through `openat2`
//! with `RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH` (one syscall), or, on kernels
//! without it, one `openat(O_NOFOLLOW)` per component.

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags};

use crate::error::{Error, Result};

/// Set once `openat2` turned out to be unavailable (old kernel, seccomp).
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// An open directory of the store and the path it was opened at (for
/// messages only: nothing is ever resolved through `path`).
///
/// A directory opened with [`Dir::open_store_root`] carries the store's
/// trust policy: every directory opened or created beneath it is checked on
/// its descriptor (`owner.rs`), so a directory another user can write to is
/// refused wherever it sits in the store, not only at the root.
#[derive(Clone, Debug)]
pub struct Dir {
    fd: Arc<OwnedFd>,
    path: PathBuf,
    /// `Some(shared)` inside a store: check each directory opened.
    trust: Option<bool>,
}

/// The mode of a directory created beneath `parent`: the parent's own
/// permission bits (with setgid, so a shared store's group-writable setgid
/// mode carries down), never writable by every user. Set explicitly, so the
/// umask neither loosens nor tightens it.
fn child_dir_mode(parent: BorrowedFd<'_>) -> rustix::io::Result<u32> {
    let st = rfs::fstat(parent)?;
    Ok(st.st_mode & 0o2775)
}

/// The kind and size of an entry, read without following it.
#[derive(Clone, Copy, Debug)]
pub struct EntryStat {
    /// What the entry is.
    pub kind: FileType,
    /// Its size in bytes.
    pub len: u64,
    /// Its mtime.
    pub mtime: std::time::SystemTime,
    /// The owning user.
    pub uid: u32,
}

impl EntryStat {
    pub(crate) fn from_stat(st: &rfs::Stat) -> EntryStat {
        let mtime = std::time::UNIX_EPOCH
            + std::time::Duration::new(st.st_mtime.max(0) as u64, st.st_mtime_nsec as u32);
        EntryStat {
            kind: FileType::from_raw_mode(st.st_mode),
            len: st.st_size as u64,
            mtime,
            uid: st.st_uid,
        }
    }

    /// True for a regular file.
    pub fn is_file(&self) -> bool {
        self.kind == FileType::RegularFile
    }

    /// Its size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// A clearer error for a symlink or a non-directory found where a store
/// directory belongs than the bare `ELOOP` / `ENOTDIR`.
fn refuse_link(e: rustix::io::Errno, what: &Path) -> Error {
    if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::NOTDIR {
        Error::io(
            what,
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "is a symlink or not a directory; the store refuses to follow links",
            ),
        )
    } else {
        Error::io(what, e.into())
    }
}

impl Dir {
    /// Opens the store root itself (which may be reached through a symlink:
    /// that is the user's choice of path, not something inside the store).
    pub fn open_root(path: &Path) -> Result<Dir> {
        let fd = rfs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::io(path, e.into()))?;
        Ok(Dir {
            fd: Arc::new(fd),
            path: path.to_path_buf(),
            trust: None,
        })
    }

    /// Opens a store root and checks who may write to it on the opened
    /// descriptor (never on the path, which could be swapped between a
    /// check and an open). Directories opened beneath it are checked too.
    /// The root may be reached through a symlink (the caller's choice of
    /// path): what counts is the directory actually opened.
    pub fn open_store_root(path: &Path, shared: bool) -> Result<Dir> {
        let mut dir = Dir::open_root(path)?;
        dir.trust = Some(shared);
        dir.check()?;
        Ok(dir)
    }

    /// Runs the store's trust check on this directory's descriptor.
    fn check(&self) -> Result<()> {
        let Some(shared) = self.trust else {
            return Ok(());
        };
        let st = rfs::fstat(self.fd()).map_err(|e| Error::io(&self.path, e.into()))?;
        crate::base::owner::check_stat(&self.path, &st, shared)
    }

    /// Checks the directory entry `name` (read without following it)
    /// like an opened directory, without opening it: for the many fan-out
    /// directories, checked at every open.
    pub(crate) fn check_entry(&self, name: &str) -> Result<()> {
        let Some(shared) = self.trust else {
            return Ok(());
        };
        let path = self.path.join(name);
        match rfs::statat(self.fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
                crate::base::owner::check_stat(&path, &st, shared)
            }
            // Not a directory: whoever opens it refuses it then.
            Ok(_) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(Error::io(path, e.into())),
        }
    }

    /// Creates the directory `name` with the mode it inherits from this one
    /// (see [`child_dir_mode`]); false when it already existed.
    fn make_sub(&self, name: &str) -> Result<bool> {
        let path = || self.path.join(name);
        let mode = child_dir_mode(self.fd()).map_err(|e| Error::io(path(), e.into()))?;
        match rfs::mkdirat(self.fd(), name, Mode::from_raw_mode(mode & 0o777)) {
            Ok(()) => {}
            Err(rustix::io::Errno::EXIST) => return Ok(false),
            Err(e) => return Err(Error::io(path(), e.into())),
        }
        // mkdir masks the mode with the umask and drops setgid on some
        // systems; set it exactly, on the directory just made (never
        // following a link planted in its place meanwhile).
        let fd = rfs::openat(self.fd(), name, dir_flags(), Mode::empty())
            .map_err(|e| refuse_link(e, &path()))?;
        rfs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| Error::io(path(), e.into()))?;
        Ok(true)
    }

    /// The path it was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Opens the subdirectory `name` (one component), creating it first when
    /// `create` is set; a symlink there is refused.
    pub fn sub(&self, name: &str, create: bool) -> Result<Dir> {
        let path = self.path.join(name);
        let open = || rfs::openat(self.fd(), name, dir_flags(), Mode::empty());
        let fd = match open() {
            Err(rustix::io::Errno::NOENT) if create => {
                self.make_sub(name)?;
                open()
            }
            other => other,
        }
        .map_err(|e| refuse_link(e, &path))?;
        let dir = Dir {
            fd: Arc::new(fd),
            path,
            trust: self.trust,
        };
        dir.check()?;
        Ok(dir)
    }

    /// Opens the directory at the '/'-separated relative path `rel`, one
    /// component at a time, creating missing ones when `create` is set.
    /// Returns `Ok(None)` when a component is missing and `create` is not set.
    pub fn descend(&self, rel: &str, create: bool) -> Result<Option<Dir>> {
        let mut dir = self.clone();
        for component in rel.split('/').filter(|c| !c.is_empty()) {
            if !create {
                match rfs::openat(dir.fd(), component, dir_flags(), Mode::empty()) {
                    Ok(fd) => {
                        dir = Dir {
                            fd: Arc::new(fd),
                            path: dir.path.join(component),
                            trust: dir.trust,
                        };
                        dir.check()?;
                    }
                    Err(rustix::io::Errno::NOENT) => return Ok(None),
                    Err(e) => return Err(refuse_link(e, &dir.path.join(component))),
                }
                continue;
            }
            let created = dir.make_sub(component)?;
            let next = dir.sub(component, false)?;
            if created {
                dir.fsync()?;
            }
            dir = next;
        }
        Ok(Some(dir))
    }

    /// Opens the file at relative path `rel` (components separated by '/')
    /// with `flags`, following no symlink anywhere on the way.
    pub fn open(&self, rel: &str, flags: OFlags, mode: u32) -> io::Result<File> {
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mode = Mode::from_raw_mode(mode);
        if !rel.contains('/') {
            return Ok(rfs::openat(self.fd(), rel, flags, mode)?.into());
        }
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH;
            match rfs::openat2(self.fd(), rel, flags, mode, resolve) {
                Ok(fd) => return Ok(fd.into()),
                Err(rustix::io::Errno::NOSYS) | Err(rustix::io::Errno::PERM) => {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(e.into()),
            }
        }
        let (parent, leaf) = rel.rsplit_once('/').expect("contains '/'");
        let mut fd: OwnedFd = rfs::openat(self.fd(), ".", dir_flags(), Mode::empty())?;
        for component in parent.split('/').filter(|c| !c.is_empty()) {
            fd = rfs::openat(&fd, component, dir_flags(), Mode::empty())?;
        }
        Ok(rfs::openat(&fd, leaf, flags, mode)?.into())
    }

    /// Reads the entry `name` without following it; `None` when absent.
    pub fn stat(&self, name: &str) -> Result<Option<EntryStat>> {
        match rfs::statat(self.fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(EntryStat::from_stat(&st))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(Error::io(self.path.join(name), e.into())),
        }
    }

    /// Removes the file (or symlink) `name`; false when it was not there.
    pub fn unlink(&self, name: &str) -> Result<bool> {
        match rfs::unlinkat(self.fd(), name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(Error::io(self.path.join(name), e.into())),
        }
    }

    /// Removes whatever is at `name`, a directory tree included, without
    /// following links: the tree is first renamed to `trash/<trash_name>` so
    /// the name is free at once.
    pub fn remove_any(&self, name: &str, trash: &Dir, trash_name: &str) -> Result<()> {
        match self.unlink(name) {
            Ok(_) => return Ok(()),
            Err(Error::Io { source, .. })
                if source.raw_os_error() == Some(libc::EISDIR)
                    || source.raw_os_error() == Some(libc::EPERM) => {}
            Err(e) => return Err(e),
        }
        rfs::renameat(self.fd(), name, trash.fd(), trash_name)
            .map_err(|e| Error::io(self.path.join(name), e.into()))?;
        // std's remove_dir_all does not follow symlinks inside the tree.
        let _ = std::fs::remove_dir_all(trash.path.join(trash_name));
        Ok(())
    }

    /// The names and kinds of the entries, `.` and `..` left out.
    pub fn entries(&self) -> Result<Vec<(String, FileType)>> {
        let dir = rfs::Dir::read_from(self.fd()).map_err(|e| Error::io(&self.path, e.into()))?;
        let mut out = Vec::new();
        for entry in dir {
            let entry = entry.map_err(|e| Error::io(&self.path, e.into()))?;
            let name: &CStr = entry.file_name();
            let Ok(name) = name.to_str() else {
                continue;
            };
            if name == "." || name == ".." {
                continue;
            }
            out.push((name.to_owned(), entry.file_type()));
        }
        Ok(out)
    }

    /// fsyncs the directory, making entries created or removed in it durable.
    pub fn fsync(&self) -> Result<()> {
        rfs::fsync(self.fd()).map_err(|e| Error::io(&self.path, e.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_symlinks_on_the_way() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("f"), b"secret").unwrap();
        let root_path = dir.path().join("root");
        std::fs::create_dir(&root_path).unwrap();
        std::os::unix::fs::symlink(&outside, root_path.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("f"), root_path.join("flink")).unwrap();
        let root = Dir::open_root(&root_path).unwrap();
        assert!(root.sub("link", false).is_err());
        assert!(root.descend("link/x", true).is_err());
        assert!(root.open("link/f", OFlags::RDONLY, 0).is_err());
        assert!(root.open("flink", OFlags::RDONLY, 0).is_err());
        NO_OPENAT2.store(true, Ordering::Relaxed);
        assert!(root.open("link/f", OFlags::RDONLY, 0).is_err());
        assert!(!root.stat("flink").unwrap().unwrap().is_file());
        assert!(root.unlink("flink").unwrap());
        assert!(outside.join("f").exists());
    }
}
