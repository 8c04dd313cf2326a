//! Writing and reading objects.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

use memmap2::Mmap;
use rayon::prelude::*;
use rustix::fs::OFlags;

use crate::error::{Error, IoContext, Result};
use crate::hash::{hash_bytes, hash_open_file, Digest};
use crate::lock::LockMode;
use crate::store::beneath::{Dir, EntryStat};
use crate::store::durable::{random_name, touch_fd, TmpFile};
use crate::store::manifest::MANIFEST_MAGIC;
use crate::store::{Blob, Store};

/// What a put did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutOutcome {
    /// The object's name.
    pub digest: Digest,
    /// False when the content was already stored (nothing was written).
    pub new: bool,
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

/// Objects this handle has hashed and found intact, by the identity of the
/// file it hashed: a dedup hit on one of them costs an open and an fstat,
/// not a rehash. Any rewrite changes the mtime or the inode, and so misses.
#[derive(Debug, Default)]
pub(crate) struct VerifiedCache {
    map: Mutex<HashMap<Digest, (u64, u64, i64, i64)>>,
}

/// Bound on the cache (about 4 MiB); it is simply emptied when full.
const VERIFIED_CACHE_MAX: usize = 1 << 16;

fn identity(meta: &std::fs::Metadata) -> (u64, u64, i64, i64) {
    (meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec())
}

impl VerifiedCache {
    fn knows(&self, digest: &Digest, meta: &std::fs::Metadata) -> bool {
        let map = self.map.lock().expect("not poisoned");
        map.get(digest) == Some(&identity(meta))
    }

    pub(crate) fn record(&self, digest: &Digest, meta: &std::fs::Metadata) {
        let mut map = self.map.lock().expect("not poisoned");
        if map.len() >= VERIFIED_CACHE_MAX {
            map.clear();
        }
        map.insert(*digest, identity(meta));
    }
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

impl Store {
    /// Stores `data`, returning its digest and whether it was new.
    pub fn put(&self, data: &[u8]) -> Result<PutOutcome> {
        let digest = hash_bytes(data);
        let new = self.put_hashed(&digest, data, false)?;
        Ok(PutOutcome { digest, new })
    }

    /// Stores `data` that the caller has already hashed to `digest`.
    ///
    /// With `recheck`, the bytes are hashed again as written, and the put
    /// fails with [`Error::Changed`] if they no longer match. Use it for
    /// inputs that another thread may modify during the call (a mutable
    /// buffer): without it such a race could install an object whose content
    /// does not match its name, which dedup would then hand to every later
    /// writer of the same content.
    pub fn put_hashed(&self, digest: &Digest, data: &[u8], recheck: bool) -> Result<bool> {
        let _lock = self.lock(LockMode::Shared)?;
        self.put_locked(
            digest,
            Expect::Bytes(data),
            |file| file.write_all(data),
            recheck.then_some("the input buffer"),
        )
    }

    /// Stores the content of the file at `src`, streaming: the file is hashed
    /// through a mapping and copied by the kernel, never read into memory.
    /// Anything but a regular file (a FIFO, a device, a directory) is refused
    /// at once: it is opened without blocking and checked before reading.
    pub fn put_file(&self, src: &Path) -> Result<PutOutcome> {
        let from = open_regular(src)?;
        let digest = hash_open_file(&from, src)?;
        let len = from.metadata().at(src)?.len();
        let _lock = self.lock(LockMode::Shared)?;
        let copy = |file: &mut File| {
            // Nothing has read through `from` (hashing mapped it), so it is
            // at offset 0; `&File` to `File` copies in the kernel.
            let mut reader = &from;
            io::copy(&mut reader, file).map(drop)
        };
        // The copy is rehashed: the file may be modified after we hashed it.
        let what = src.display().to_string();
        let new = self.put_locked(&digest, Expect::Len(len), copy, Some(&what))?;
        Ok(PutOutcome { digest, new })
    }

    /// The write path; the caller holds the GC lock shared.
    ///
    /// An object already at the path is checked before it counts as a dedup
    /// hit (a regular file of length `len` that hashes to `digest`; see
    /// [`VerifiedCache`] for why this stays cheap); anything else there is
    /// damage, and the put replaces it.
    pub(crate) fn put_locked(
        &self,
        digest: &Digest,
        expect: Expect<'_>,
        fill: impl FnOnce(&mut File) -> io::Result<()>,
        recheck: Option<&str>,
    ) -> Result<bool> {
        self.counters.count_put();
        let existing = self.existing(digest, expect)?;
        if let Existing::Good(file) = &existing {
            self.keep_fresh(digest, file)?;
            self.counters.count_dedup_hit();
            return Ok(false);
        }
        let mut tmp = TmpFile::create(&self.dirs.tmp, 0o444)?;
        let tmp_path = tmp.path();
        fill(tmp.file()).at(&tmp_path)?;
        tmp.sync()?;
        if let Some(what) = recheck {
            if hash_open_file(tmp.file(), &tmp_path)? != *digest {
                return Err(Error::Changed(format!(
                    "{what} changed while it was being stored; nothing was stored"
                )));
            }
        }
        let meta = tmp.file().metadata().at(&tmp_path)?;
        if let Existing::Damaged { directory } = existing {
            self.replace(&tmp, digest, directory)?;
            self.verified.record(digest, &meta);
            return Ok(true);
        }
        let new = self.install(&tmp, digest)?;
        if new {
            self.verified.record(digest, &meta);
            return Ok(true);
        }
        // Another writer linked it first: first writer wins, if it is sound.
        match self.existing(digest, expect)? {
            Existing::Good(file) => {
                self.keep_fresh(digest, &file)?;
                self.counters.count_dedup_hit();
                Ok(false)
            }
            Existing::Absent => self.install(&tmp, digest),
            Existing::Damaged { directory } => {
                self.replace(&tmp, digest, directory)?;
                Ok(true)
            }
        }
    }

    /// The fan-out directory of `digest`, recreated if it was removed.
    fn fan_dir(&self, fan: &str) -> Result<Dir> {
        match self.dirs.objects.descend(fan, false)? {
            Some(dir) => Ok(dir),
            None => Ok(self.dirs.objects.descend(fan, true)?.expect("created")),
        }
    }

    /// Links a complete, fsynced tmp file at the object's path without
    /// overwriting, then makes the new entry durable. False when something
    /// was already there.
    fn install(&self, tmp: &TmpFile, digest: &Digest) -> Result<bool> {
        let (fan, name) = object_names(digest);
        let fan = self.fan_dir(&fan)?;
        let new = tmp.link_to(&fan, &name)?;
        if new {
            fan.fsync()?;
        }
        Ok(new)
    }

    /// Puts a complete, fsynced tmp file in place of a damaged object: a
    /// rename replaces a file or a symlink atomically (never following it);
    /// a directory is moved aside into `tmp/` and removed first.
    fn replace(&self, tmp: &TmpFile, digest: &Digest, directory: bool) -> Result<()> {
        let (fan, name) = object_names(digest);
        let fan = self.fan_dir(&fan)?;
        if directory {
            let trash = format!("{}.damaged", random_name());
            fan.remove_any(&name, &self.dirs.tmp, &trash)?;
        }
        // A hard link of the tmp file renamed over the object: the tmp name
        // stays ours, so its drop still cleans up.
        let second = format!("{}.tmp", random_name());
        tmp.link_to(&self.dirs.tmp, &second)?;
        rustix::fs::renameat(self.dirs.tmp.fd(), second.as_str(), fan.fd(), name.as_str())
            .map_err(|e| Error::io(fan.path().join(&name), e.into()))?;
        fan.fsync()
    }

    /// Opens what is at the object's path without following a link, and
    /// classifies it. Its length must match what `expect` knows; its content
    /// must equal the expected bytes, or hash to `digest` (unless this
    /// handle's cache already knows this very file as sound).
    pub(crate) fn existing(&self, digest: &Digest, expect: Expect<'_>) -> Result<Existing> {
        let rel = object_rel(digest);
        let file = match self
            .dirs
            .objects
            .open(&rel, OFlags::RDONLY | OFlags::NONBLOCK, 0)
        {
            Ok(file) => file,
            Err(e) => {
                return match e.raw_os_error() {
                    Some(libc::ENOENT) => Ok(Existing::Absent),
                    // A symlink (dangling or not) at the object path, or in
                    // its fan-out directory's place.
                    Some(libc::ELOOP) | Some(libc::ENOTDIR) | Some(libc::ENXIO) => {
                        Ok(Existing::Damaged { directory: false })
                    }
                    _ => Err(Error::io(self.dirs.objects.path().join(rel), e)),
                };
            }
        };
        let meta = file.metadata().at(&self.dirs.objects.path().join(&rel))?;
        if meta.is_dir() {
            return Ok(Existing::Damaged { directory: true });
        }
        let len = match expect {
            Expect::Unknown => None,
            Expect::Len(len) => Some(len),
            Expect::Bytes(bytes) => Some(bytes.len() as u64),
        };
        if !meta.is_file() || len.is_some_and(|len| len != meta.len()) {
            return Ok(Existing::Damaged { directory: false });
        }
        if self.verified.knows(digest, &meta) {
            return Ok(Existing::Good(file));
        }
        let path = self.dirs.objects.path().join(&rel);
        let sound = match expect {
            Expect::Bytes(bytes) if !bytes.is_empty() => {
                // SAFETY: a read-only mapping of a stored object; should the
                // file change meanwhile, the comparison merely fails and the
                // put replaces it.
                let map = unsafe { Mmap::map(&file) }.at(&path)?;
                map[..] == *bytes
            }
            _ => hash_open_file(&file, &path)? == *digest,
        };
        if !sound {
            return Ok(Existing::Damaged { directory: false });
        }
        self.verified.record(digest, &meta);
        Ok(Existing::Good(file))
    }

    /// Makes sure GC's grace period still protects an object a put found
    /// already stored.
    ///
    /// Why: a put that finds its content already stored writes nothing, but
    /// that existing object may be old and unreferenced (its last ref was
    /// deleted), so the next GC would sweep it before our caller gets to
    /// `set_ref` it. Bumping its mtime makes it "young" again for at least
    /// `freshen_after` (half the default grace). Only objects older than
    /// that are touched, so the common dedup hit writes nothing.
    ///
    /// In a group-shared store the object may belong to another user, whose
    /// file we may not touch. Then a fresh copy of it, owned by us, is
    /// renamed over it: same content, new mtime, and readers that have the
    /// old one mapped keep it.
    pub(crate) fn keep_fresh(&self, digest: &Digest, file: &File) -> Result<()> {
        let path = || self.dirs.objects.path().join(object_rel(digest));
        let meta = file.metadata().at(&path())?;
        let age = SystemTime::now()
            .duration_since(meta.modified().at(&path())?)
            .unwrap_or_default();
        if age <= self.options.freshen_after {
            return Ok(());
        }
        match touch_fd(file) {
            Ok(()) => {
                if let Ok(meta) = file.metadata() {
                    self.verified.record(digest, &meta);
                }
                Ok(())
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) => {
                let mut tmp = TmpFile::create(&self.dirs.tmp, 0o444)?;
                let tmp_path = tmp.path();
                let mut reader = ReadAt { file, at: 0 };
                io::copy(&mut reader, tmp.file()).at(&tmp_path)?;
                tmp.sync()?;
                if hash_open_file(tmp.file(), &tmp_path)? != *digest {
                    return Err(Error::Corrupt { digest: *digest });
                }
                self.replace(&tmp, digest, false)
            }
            Err(e) => Err(Error::io(path(), e)),
        }
    }

    /// Maps the object named `digest`, checking its digest unless the store
    /// was opened with `verify: false`. A missing object is
    /// [`Error::Missing`]; one whose bytes do not hash to its name (a flipped
    /// byte, a truncation), or anything but a regular file at its path, is
    /// [`Error::Corrupt`]: wrong bytes are never returned.
    pub fn get(&self, digest: &Digest) -> Result<Blob> {
        let blob = self.map_object(digest).inspect_err(|e| {
            if matches!(e, Error::Missing { .. }) {
                self.counters.count_miss();
            }
        })?;
        self.counters.count_get();
        if self.options.verify && hash_bytes(&blob) != *digest {
            return Err(Error::Corrupt { digest: *digest });
        }
        Ok(blob)
    }

    /// Maps several objects and checks them, on all cores when there are
    /// enough of them to pay for it; the result is in the order of `digests`.
    ///
    /// Why: loading one compiled entry reads dozens to hundreds of small
    /// objects (kernel files, sources, pickles). One call keeps the per-object
    /// cost to the syscalls and the hash, and spreads those over the pool.
    /// The first missing or corrupt object fails the whole call.
    pub fn get_many(&self, digests: &[Digest]) -> Result<Vec<Blob>> {
        // Below this count the pool's hand-off costs more than it saves.
        const PARALLEL_FROM: usize = 16;
        if digests.len() < PARALLEL_FROM {
            return digests.iter().map(|d| self.get(d)).collect();
        }
        crate::pool::install(|| digests.par_iter().map(|d| self.get(d)).collect())
    }

    /// Opens an object for reading, following no link: a symlink or a
    /// non-regular file at its path is [`Error::Corrupt`].
    pub(crate) fn open_object(&self, digest: &Digest) -> Result<(File, EntryStat)> {
        let rel = object_rel(digest);
        let path = || self.dirs.objects.path().join(&rel);
        let file = match self
            .dirs
            .objects
            .open(&rel, OFlags::RDONLY | OFlags::NONBLOCK, 0)
        {
            Ok(file) => file,
            Err(e) => {
                return Err(match e.raw_os_error() {
                    Some(libc::ENOENT) => Error::Missing { digest: *digest },
                    Some(libc::ELOOP) | Some(libc::ENOTDIR) | Some(libc::ENXIO) => {
                        Error::Corrupt { digest: *digest }
                    }
                    _ => Error::io(path(), e),
                })
            }
        };
        let st = rustix::fs::fstat(&file).map_err(|e| Error::io(path(), e.into()))?;
        let st = EntryStat::from_stat(&st);
        if !st.is_file() {
            return Err(Error::Corrupt { digest: *digest });
        }
        Ok((file, st))
    }

    /// Maps an object without verifying it.
    pub(crate) fn map_object(&self, digest: &Digest) -> Result<Blob> {
        Ok(self.map_object_known(digest)?.0)
    }

    /// [`map_object`](Self::map_object), also saying whether this handle
    /// already hashed this very file and found it sound.
    pub(crate) fn map_object_known(&self, digest: &Digest) -> Result<(Blob, bool)> {
        let (file, st) = self.open_object(digest)?;
        let known = (file.metadata().ok()).is_some_and(|m| self.verified.knows(digest, &m));
        // A zero-length file cannot be mapped; it is simply the empty blob.
        let map = if st.len == 0 {
            None
        } else {
            // SAFETY: objects are immutable once visible: they are written
            // completely to a private tmp file, linked into place read-only
            // (0444), and afterwards only ever unlinked or renamed over,
            // never written or truncated. Unlinking keeps the mapping valid.
            Some(unsafe { Mmap::map(&file) }.at(&self.object_path(digest))?)
        };
        Ok((Blob::new(*digest, map), known))
    }

    /// Whether the object named `digest` is stored (one stat; anything at
    /// its path counts, damaged or not).
    pub fn contains(&self, digest: &Digest) -> Result<bool> {
        let rel = object_rel(digest);
        match rustix::fs::statat(
            self.dirs.objects.fd(),
            rel.as_str(),
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        ) {
            Ok(_) => Ok(true),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(Error::io(self.object_path(digest), e.into())),
        }
    }

    /// Whether the first bytes of an open object are the manifest magic.
    pub(crate) fn starts_like_manifest(file: &File) -> bool {
        let mut head = [0u8; MANIFEST_MAGIC.len()];
        file.read_exact_at(&mut head, 0).is_ok() && head == MANIFEST_MAGIC
    }
}

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

/// Reads a file from offset 0 with pread, leaving its file position alone.
struct ReadAt<'a> {
    file: &'a File,
    at: u64,
}

impl io::Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Options;
    use std::fs;
    use std::time::Duration;

    fn store(dir: &Path) -> Store {
        Store::open(dir.join("s"), Options::default()).unwrap()
    }

    #[test]
    fn put_get_dedup() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let a = s.put(b"hello").unwrap();
        assert!(a.new);
        assert_eq!(a.digest, hash_bytes(b"hello"));
        assert!(!s.put(b"hello").unwrap().new);
        assert_eq!(s.get(&a.digest).unwrap().as_bytes(), b"hello");
        assert!(s.contains(&a.digest).unwrap());
        let empty = s.put(b"").unwrap();
        assert_eq!(s.get(&empty.digest).unwrap().len(), 0);
        assert_eq!(fs::read_dir(s.layout().tmp_dir()).unwrap().count(), 0);
    }

    #[test]
    fn corrupt_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let d = s.put(b"some content").unwrap().digest;
        let p = s.object_path(&d);
        fs::remove_file(&p).unwrap();
        fs::write(&p, b"some contenT").unwrap();
        assert!(matches!(s.get(&d), Err(Error::Corrupt { .. })));
        let unverified = Store::open(
            s.path(),
            Options {
                verify: false,
                ..Options::default()
            },
        );
        assert_eq!(
            unverified.unwrap().get(&d).unwrap().as_bytes(),
            b"some contenT"
        );
        fs::remove_file(&p).unwrap();
        assert!(matches!(s.get(&d), Err(Error::Missing { .. })));
    }

    #[test]
    fn recheck_refuses_changed_input() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let wrong = hash_bytes(b"what the caller hashed");
        let err = s.put_hashed(&wrong, b"what was written", true).unwrap_err();
        assert!(matches!(err, Error::Changed(_)), "{err}");
        assert!(!s.contains(&wrong).unwrap());
    }

    #[test]
    fn dedup_freshens_old_objects() {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            freshen_after: Duration::from_millis(50),
            ..Options::default()
        };
        let s = Store::open(dir.path().join("s"), opts).unwrap();
        let d = s.put(b"old").unwrap().digest;
        let p = s.object_path(&d);
        let before = fs::metadata(&p).unwrap().modified().unwrap();
        std::thread::sleep(Duration::from_millis(120));
        assert!(!s.put(b"old").unwrap().new);
        assert!(fs::metadata(&p).unwrap().modified().unwrap() > before);
    }

    #[test]
    fn put_file_streams_and_dedups() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let src = dir.path().join("src.bin");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        fs::write(&src, &data).unwrap();
        let out = s.put_file(&src).unwrap();
        assert!(out.new);
        assert_eq!(out.digest, hash_bytes(&data));
        assert_eq!(s.get(&out.digest).unwrap().as_bytes(), &data[..]);
        assert!(!s.put(&data).unwrap().new);
    }
}
