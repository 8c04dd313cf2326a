//! Checking an object already at its path before a put counts it as a
//! dedup hit, keeping it fresh for GC, and replacing it when it is damaged.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;
use std::time::SystemTime;

use memmap2::Mmap;

use crate::base::beneath::Dir;
use crate::base::durable::{random_name, touch_fd, TmpFile};
use crate::base::{object_names, object_rel, open_object_at, Existing, Expect, Opened};
use crate::error::{Error, IoContext, Result};
use crate::hash::{hash_open_file, Digest};
use crate::store::objects::ReadAt;
use crate::store::Store;

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
    pub(crate) fn knows(&self, digest: &Digest, meta: &std::fs::Metadata) -> bool {
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

impl Store {
    /// The fan-out directory of `digest`, recreated if it was removed.
    pub(crate) fn fan_dir(&self, fan: &str) -> Result<Dir> {
        match self.dirs.objects.descend(fan, false)? {
            Some(dir) => Ok(dir),
            None => Ok(self.dirs.objects.descend(fan, true)?.expect("created")),
        }
    }

    /// Links a complete, fsynced tmp file at the object's path without
    /// overwriting, then makes the new entry durable. False when something
    /// was already there.
    pub(crate) fn install(&self, tmp: &TmpFile, digest: &Digest) -> Result<bool> {
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
    pub(crate) fn replace(&self, tmp: &TmpFile, digest: &Digest, directory: bool) -> Result<()> {
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
        let file = match open_object_at(&self.dirs.objects, digest) {
            Ok(Opened::File(file)) => file,
            Ok(Opened::Absent) => return Ok(Existing::Absent),
            Ok(Opened::Link) => return Ok(Existing::Damaged { directory: false }),
            Err(e) => return Err(Error::io(self.dirs.objects.path().join(rel), e)),
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
}
