//! Writing and reading objects.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;
use std::time::SystemTime;

use memmap2::Mmap;
use rayon::prelude::*;

use crate::error::{Error, IoContext, Result};
use crate::hash::{hash_bytes, hash_file, hash_open_file, Digest};
use crate::lock::LockMode;
use crate::store::durable::{fsync_dir, mtime, touch, TmpFile};
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
            |file| file.write_all(data),
            recheck.then_some("the input buffer"),
        )
    }

    /// Stores the content of the file at `src`, streaming: the file is hashed
    /// through a mapping and copied by the kernel, never read into memory.
    pub fn put_file(&self, src: &Path) -> Result<PutOutcome> {
        let digest = hash_file(src)?;
        let _lock = self.lock(LockMode::Shared)?;
        let copy = |file: &mut File| {
            let mut from = File::open(src)?;
            io::copy(&mut from, file).map(drop)
        };
        // The copy is rehashed: the file may be modified after we hashed it.
        let what = src.display().to_string();
        let new = self.put_locked(&digest, copy, Some(&what))?;
        Ok(PutOutcome { digest, new })
    }

    /// The write path; the caller holds the GC lock shared.
    pub(crate) fn put_locked(
        &self,
        digest: &Digest,
        fill: impl FnOnce(&mut File) -> io::Result<()>,
        recheck: Option<&str>,
    ) -> Result<bool> {
        self.counters.count_put();
        let obj = self.object_path(digest);
        // Dedup: one stat, nothing written.
        if self.freshen(&obj)? {
            self.counters.count_dedup_hit();
            return Ok(false);
        }
        let mut tmp = TmpFile::create(&self.layout.tmp_dir(), 0o444)?;
        let tmp_path = tmp.path().to_path_buf();
        fill(tmp.file()).at(&tmp_path)?;
        tmp.sync()?;
        if let Some(what) = recheck {
            if hash_open_file(tmp.file(), &tmp_path)? != *digest {
                return Err(Error::Changed(format!(
                    "{what} changed while it was being stored; nothing was stored"
                )));
            }
        }
        let new = self.install(&tmp, &obj)?;
        if !new {
            // Another writer linked the same content first: first writer wins.
            self.freshen(&obj)?;
            self.counters.count_dedup_hit();
        }
        Ok(new)
    }

    /// Links a complete, fsynced tmp file at `obj` without overwriting, then
    /// makes the new entry durable. False when `obj` already existed.
    fn install(&self, tmp: &TmpFile, obj: &Path) -> Result<bool> {
        let fan = obj.parent().expect("object paths have a fan-out parent");
        let new = match tmp.link_to(obj) {
            Err(e) if e.is_not_found() => {
                // The fan-out directory was removed behind our back.
                fs::create_dir_all(fan).at(fan)?;
                fsync_dir(&self.layout.objects_dir())?;
                tmp.link_to(obj)?
            }
            other => other?,
        };
        if new {
            fsync_dir(fan)?;
        }
        Ok(new)
    }

    /// If the object at `obj` exists, makes sure GC's grace period still
    /// protects it, and returns true.
    ///
    /// Why: a put that finds its content already stored writes nothing, but
    /// that existing object may be old and unreferenced (its last ref was
    /// deleted), so the next GC would sweep it before our caller gets to
    /// `set_ref` it. Bumping its mtime makes it "young" again for at least
    /// `freshen_after` (half the default grace). Only objects older than
    /// that are touched, so the common dedup hit stays a single stat.
    pub(crate) fn freshen(&self, obj: &Path) -> Result<bool> {
        let meta = match fs::symlink_metadata(obj) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Error::io(obj, e)),
        };
        let age = SystemTime::now()
            .duration_since(mtime(&meta, obj)?)
            .unwrap_or_default();
        if age > self.options.freshen_after {
            return touch(obj);
        }
        Ok(true)
    }

    /// Maps the object named `digest`, checking its digest unless the store
    /// was opened with `verify: false`. A missing object is
    /// [`Error::Missing`]; one whose bytes do not hash to its name (a flipped
    /// byte, a truncation) is [`Error::Corrupt`]: wrong bytes are never
    /// returned.
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

    /// Maps and checks several objects, on all cores when there are enough
    /// of them to pay for it; the result is in the order of `digests`.
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

    /// Maps an object without verifying it.
    pub(crate) fn map_object(&self, digest: &Digest) -> Result<Blob> {
        let path = self.object_path(digest);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::Missing { digest: *digest })
            }
            Err(e) => return Err(Error::io(path, e)),
        };
        let len = file.metadata().at(&path)?.len();
        // A zero-length file cannot be mapped; it is simply the empty blob.
        let map = if len == 0 {
            None
        } else {
            // SAFETY: objects are immutable once visible: they are written
            // completely to a private tmp file, linked into place read-only
            // (0444), and afterwards only ever unlinked, never written or
            // truncated. Unlinking keeps the mapping valid.
            Some(unsafe { Mmap::map(&file) }.at(&path)?)
        };
        Ok(Blob::new(*digest, map))
    }

    /// Whether the object named `digest` is stored (one stat).
    pub fn contains(&self, digest: &Digest) -> Result<bool> {
        let path = self.object_path(digest);
        match fs::symlink_metadata(&path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io(path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Options;
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
