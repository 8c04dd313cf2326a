//! Writing and reading objects.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

use memmap2::Mmap;
use rayon::prelude::*;

use crate::base::beneath::EntryStat;
use crate::base::durable::TmpFile;
use crate::base::manifest::MANIFEST_MAGIC;
use crate::base::{object_rel, open_object_at, open_regular, Existing, Expect, Opened};
use crate::error::{Error, IoContext, Result};
use crate::hash::{hash_bytes, hash_open_file, Digest};
use crate::lock::LockMode;
use crate::store::{Blob, Store};

/// What a put did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutOutcome {
    /// The object's name.
    pub digest: Digest,
    /// False when the content was already stored (nothing was written).
    pub new: bool,
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
        let path = || self.object_path(digest);
        let file = match open_object_at(&self.dirs.objects, digest) {
            Ok(Opened::File(file)) => file,
            Ok(Opened::Absent) => return Err(Error::Missing { digest: *digest }),
            Ok(Opened::Link) => return Err(Error::Corrupt { digest: *digest }),
            Err(e) => return Err(Error::io(path(), e)),
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
    /// The file's metadata comes back too, for recording a later check.
    pub(crate) fn map_object_known(
        &self,
        digest: &Digest,
    ) -> Result<(Blob, bool, Option<std::fs::Metadata>)> {
        let (file, st) = self.open_object(digest)?;
        let meta = file.metadata().ok();
        let known = meta
            .as_ref()
            .is_some_and(|m| self.verified.knows(digest, m));
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
        Ok((Blob::new(*digest, map), known, meta))
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

    /// Whether the object named `digest` starts like a manifest, read
    /// without following a link or blocking: anything but a regular file at
    /// its path is [`Error::Corrupt`], an absent one [`Error::Missing`].
    /// The content is not verified (`get_manifest` does that).
    pub fn is_manifest(&self, digest: &Digest) -> Result<bool> {
        let (file, _) = self.open_object(digest)?;
        Ok(Store::starts_like_manifest(&file))
    }

    /// The size of the object named `digest`, read like
    /// [`is_manifest`](Self::is_manifest).
    pub fn object_size(&self, digest: &Digest) -> Result<u64> {
        Ok(self.open_object(digest)?.1.len)
    }

    /// Whether the first bytes of an open object are the manifest magic.
    pub(crate) fn starts_like_manifest(file: &File) -> bool {
        let mut head = [0u8; MANIFEST_MAGIC.len()];
        file.read_exact_at(&mut head, 0).is_ok() && head == MANIFEST_MAGIC
    }
}

/// Reads a file from offset 0 with pread, leaving its file position alone.
pub(crate) struct ReadAt<'a> {
    pub file: &'a File,
    pub at: u64,
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
