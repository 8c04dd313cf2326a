//! Streaming construction of a bundle file.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::format::SIGNATURE_LEN;
use super::format::{self, Header, HEADER_LEN, MIN_ALIGN, PAGE_ALIGN};
use super::sign::SecretKey;
use super::{corrupt_error, index, io_error, missing_error, refs};
use crate::error::Error;

/// What [`BundleWriter::finish`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BundleSummary {
    /// Number of distinct blobs in the bundle.
    pub blobs: u64,
    /// Number of refs in the bundle.
    pub refs: u64,
    /// Size of the bundle file in bytes.
    pub bytes: u64,
}

/// Writes a bundle: blobs stream to a temporary file beside the target, and
/// [`finish`](Self::finish) appends the index, refs and trailer, fsyncs, and renames the
/// file into place, so readers see either no bundle or a complete one.
///
/// Dropping a writer without calling `finish` removes the temporary file.
#[derive(Debug)]
pub struct BundleWriter {
    path: PathBuf,
    tmp_path: PathBuf,
    out: BufWriter<File>,
    /// Offset of the next byte the writer will write.
    pos: u64,
    blobs: HashMap<[u8; 32], (u64, u64)>,
    refs: BTreeMap<String, [u8; 32]>,
    /// Set once a write failed part-way, after which `pos` no longer matches the file.
    poisoned: bool,
    finished: bool,
}

/// A temporary file beside the target older than this belongs to an export
/// that was killed: nothing writes a bundle for that long without touching
/// the file. [`BundleWriter::create`] removes such leftovers.
pub const STALE_TMP_AGE: std::time::Duration = std::time::Duration::from_secs(3600);
// Padding source; blobs are at most a page apart.
static ZEROS: [u8; PAGE_ALIGN as usize] = [0; PAGE_ALIGN as usize];
// Read size for streamed blobs: large enough to amortize syscalls and let blake3 use SIMD.
const CHUNK: usize = 1 << 20;

impl BundleWriter {
    /// Starts a bundle that [`finish`](Self::finish) will place at `path`, replacing any file
    /// there. The parent directory must exist.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref().to_path_buf();
        let name = path.file_name().ok_or_else(|| {
            io_error(
                &path,
                io::Error::new(io::ErrorKind::InvalidInput, "bundle path has no file name"),
            )
        })?;
        let name = name.to_string_lossy().into_owned();
        remove_stale_tmp(&path, &name);
        // Unpredictable and created with O_EXCL: a pid namespace repeating
        // pids, or another user planting a name, cannot collide with it.
        let tmp_name = format!(".{name}.{}.tmp", crate::base::durable::random_name());
        let tmp_path = path.with_file_name(tmp_name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp_path)
            .map_err(|e| io_error(&tmp_path, e))?;
        let mut out = BufWriter::with_capacity(CHUNK, file);
        // The header is rewritten by finish(); zeros here keep an unfinished file unopenable.
        out.write_all(&[0u8; HEADER_LEN])
            .map_err(|e| io_error(&tmp_path, e))?;
        Ok(BundleWriter {
            path,
            tmp_path,
            out,
            pos: HEADER_LEN as u64,
            blobs: HashMap::new(),
            refs: BTreeMap::new(),
            poisoned: false,
            finished: false,
        })
    }

    /// Adds a blob whose blake3 digest is `digest`; returns `false` if the bundle already
    /// holds it (the bytes are then not written again).
    ///
    /// The bytes are hashed before writing and a mismatch is `Error::Corrupt`, so a bundle
    /// never ships a blob under the wrong name.
    pub fn add_blob(&mut self, digest: [u8; 32], data: &[u8]) -> Result<bool, Error> {
        self.check_usable()?;
        if self.blobs.contains_key(&digest) {
            return Ok(false);
        }
        if crate::hash::hash_bytes(data).as_bytes() != &digest {
            return Err(corrupt_error(&digest));
        }
        let offset = self.pad_for(data.len() as u64)?;
        self.guarded(|out| out.write_all(data))?;
        self.pos += data.len() as u64;
        self.blobs.insert(digest, (offset, data.len() as u64));
        Ok(true)
    }

    /// Adds a blob by streaming exactly `len` bytes from `reader`, without holding it in
    /// memory; returns `false` if the bundle already holds `digest` (nothing is read then).
    ///
    /// The bytes are hashed while copied; on a digest mismatch the written bytes are cut off
    /// again and `Error::Corrupt` is returned. A reader that ends early is an I/O error.
    pub fn add_blob_from_reader(
        &mut self,
        digest: [u8; 32],
        len: u64,
        reader: impl Read,
    ) -> Result<bool, Error> {
        self.check_usable()?;
        if self.blobs.contains_key(&digest) {
            return Ok(false);
        }
        let start = self.pos;
        let offset = self.pad_for(len)?;
        let mut hasher = blake3::Hasher::new();
        let mut reader = reader.take(len);
        let mut buf = vec![0u8; CHUNK.min(len as usize).max(1)];
        let mut copied = 0u64;
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.rollback(start, e)),
            };
            hasher.update(&buf[..n]);
            self.guarded(|out| out.write_all(&buf[..n]))?;
            copied += n as u64;
        }
        if copied != len {
            let e = io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("blob ended after {copied} of {len} bytes"),
            );
            return Err(self.rollback(start, e));
        }
        if *hasher.finalize().as_bytes() != digest {
            self.truncate_to(start)?;
            return Err(corrupt_error(&digest));
        }
        self.pos = offset + len;
        self.blobs.insert(digest, (offset, len));
        Ok(true)
    }

    /// Adds the contents of the file at `path` as a blob, streaming it; see
    /// [`add_blob_from_reader`](Self::add_blob_from_reader).
    pub fn add_blob_from_path(
        &mut self,
        digest: [u8; 32],
        path: impl AsRef<Path>,
    ) -> Result<bool, Error> {
        let path = path.as_ref();
        if self.blobs.contains_key(&digest) {
            return Ok(false);
        }
        let file = File::open(path).map_err(|e| io_error(path, e))?;
        let len = file.metadata().map_err(|e| io_error(path, e))?.len();
        self.add_blob_from_reader(digest, len, file)
    }

    /// Names `digest` as `name`. The blob may be added before or after its ref, but must be
    /// in the bundle by [`finish`](Self::finish). Re-adding the same pair is a no-op; pointing
    /// an existing name elsewhere is `Error::InvalidName`.
    pub fn add_ref(&mut self, name: &str, digest: [u8; 32]) -> Result<(), Error> {
        refs::validate_ref_name(name)?;
        match self.refs.get(name) {
            Some(existing) if *existing != digest => Err(Error::InvalidName(format!(
                "ref {name:?} was already added with another digest"
            ))),
            Some(_) => Ok(()),
            None => {
                self.refs.insert(name.to_owned(), digest);
                Ok(())
            }
        }
    }

    /// Number of distinct blobs added so far.
    pub fn blob_count(&self) -> usize {
        self.blobs.len()
    }

    /// Writes the index, refs table, trailer and header, fsyncs the file, and renames it
    /// into place (then fsyncs the directory so the rename survives a crash).
    ///
    /// A ref whose blob was never added is `Error::Missing`.
    pub fn finish(self) -> Result<BundleSummary, Error> {
        self.finish_signed(None)
    }

    /// [`finish`](Self::finish), signing the header, index and refs table with `key` when
    /// given (format version 2; see `sign.rs`).
    pub fn finish_signed(mut self, key: Option<&SecretKey>) -> Result<BundleSummary, Error> {
        self.check_usable()?;
        if let Some(digest) = self.refs.values().find(|d| !self.blobs.contains_key(*d)) {
            return Err(missing_error(digest));
        }
        let mut entries: Vec<([u8; 32], u64, u64)> = self
            .blobs
            .iter()
            .map(|(d, &(offset, len))| (*d, offset, len))
            .collect();
        entries.sort_unstable_by_key(|e| e.0);
        let mut tail = index::encode(&entries);
        let index_len = tail.len() as u64;
        let refs_bytes = refs::encode(&self.refs);
        tail.extend_from_slice(&refs_bytes);
        let sig_offset = self.pos + tail.len() as u64;

        let header = Header {
            page_align: PAGE_ALIGN,
            min_align: MIN_ALIGN,
            blob_count: entries.len() as u64,
            ref_count: self.refs.len() as u64,
            data_offset: HEADER_LEN as u64,
            data_len: self.pos - HEADER_LEN as u64,
            index_offset: self.pos,
            index_len,
            refs_offset: self.pos + index_len,
            refs_len: refs_bytes.len() as u64,
            sig_offset: if key.is_some() { sig_offset } else { 0 },
            sig_len: if key.is_some() {
                SIGNATURE_LEN as u64
            } else {
                0
            },
        };
        let header_bytes = header.encode();
        let digest = format::trailer_hash(&header_bytes, &tail);
        if let Some(key) = key {
            tail.extend_from_slice(&key.sign_section(&digest));
        }
        tail.extend_from_slice(&digest);
        tail.extend_from_slice(&format::END_MAGIC);
        let bytes = self.pos + tail.len() as u64;

        let tmp = self.tmp_path.clone();
        self.guarded(|out| {
            out.write_all(&tail)?;
            out.flush()?;
            let file = out.get_ref();
            file.write_all_at(&header_bytes, 0)?;
            file.sync_all()
        })?;
        std::fs::rename(&tmp, &self.path).map_err(|e| io_error(&self.path, e))?;
        self.finished = true;
        sync_parent_dir(&self.path)?;
        Ok(BundleSummary {
            blobs: header.blob_count,
            refs: header.ref_count,
            bytes,
        })
    }

    /// Writes zero padding so the next blob of `len` bytes starts aligned; returns its offset.
    fn pad_for(&mut self, len: u64) -> Result<u64, Error> {
        let align = format::align_for(len, PAGE_ALIGN, MIN_ALIGN);
        let offset = self.pos.next_multiple_of(align);
        let pad = (offset - self.pos) as usize;
        self.guarded(|out| out.write_all(&ZEROS[..pad]))?;
        self.pos = offset;
        Ok(offset)
    }

    /// Runs a write; a failure poisons the writer, since the file position is then unknown.
    fn guarded<T>(
        &mut self,
        op: impl FnOnce(&mut BufWriter<File>) -> io::Result<T>,
    ) -> Result<T, Error> {
        op(&mut self.out).map_err(|e| {
            self.poisoned = true;
            io_error(&self.tmp_path, e)
        })
    }

    /// Cuts the file back to `start` after a failed streamed blob and reports `cause`.
    fn rollback(&mut self, start: u64, cause: io::Error) -> Error {
        match self.truncate_to(start) {
            Ok(()) => io_error(&self.tmp_path, cause),
            Err(e) => e,
        }
    }

    fn truncate_to(&mut self, start: u64) -> Result<(), Error> {
        self.guarded(|out| {
            out.flush()?;
            let file = out.get_mut();
            file.set_len(start)?;
            file.seek(SeekFrom::Start(start)).map(|_| ())
        })?;
        self.pos = start;
        Ok(())
    }

    fn check_usable(&self) -> Result<(), Error> {
        if self.poisoned {
            let e = io::Error::other("an earlier write to this bundle failed");
            return Err(io_error(&self.tmp_path, e));
        }
        Ok(())
    }
}

impl Drop for BundleWriter {
    fn drop(&mut self) {
        if !self.finished {
            // Best effort: an abandoned bundle must not leave a stray temporary file behind.
            let _ = std::fs::remove_file(&self.tmp_path);
        }
    }
}

/// Whether `entry` is the name of a temporary file a writer for `name`
/// creates: `.<name>.<32 hex>.tmp`, or `.<name>.<pid>.<n>.tmp` as written by
/// earlier versions.
fn is_tmp_name_for(entry: &str, name: &str) -> bool {
    let Some(middle) = (entry.strip_prefix('.'))
        .and_then(|e| e.strip_prefix(name))
        .and_then(|e| e.strip_prefix('.'))
        .and_then(|e| e.strip_suffix(".tmp"))
    else {
        return false;
    };
    let random = middle.len() == 32 && middle.bytes().all(|b| b.is_ascii_hexdigit());
    let counted = (middle.split_once('.')).is_some_and(|(a, b)| {
        [a, b]
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()))
    });
    random || counted
}

/// Removes temporary files of killed writers for the same target (regular
/// files only, never following a link), older than [`STALE_TMP_AGE`].
/// Best effort: a failure here must not stop the export.
fn remove_stale_tmp(path: &Path, name: &str) {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(entry_name) = file_name.to_str() else {
            continue;
        };
        if !is_tmp_name_for(entry_name, name) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        let age = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok());
        if meta.is_file() && age.is_some_and(|a| a > STALE_TMP_AGE) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn sync_parent_dir(path: &Path) -> Result<(), Error> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, e))
}

#[cfg(test)]
mod tmp_name_tests {
    use super::*;

    #[test]
    fn recognizes_own_temporary_names() {
        assert!(is_tmp_name_for(
            ".m.bundle.0123456789abcdef0123456789abcdef.tmp",
            "m.bundle"
        ));
        assert!(is_tmp_name_for(".m.bundle.123.4.tmp", "m.bundle"));
        assert!(!is_tmp_name_for(".m.bundle.tmp", "m.bundle"));
        assert!(!is_tmp_name_for(".other.123.4.tmp", "m.bundle"));
        assert!(!is_tmp_name_for("m.bundle", "m.bundle"));
        assert!(!is_tmp_name_for(".m.bundle.12x.4.tmp", "m.bundle"));
    }

    #[test]
    fn create_removes_stale_leftovers_only() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("m.bundle");
        let stale = dir
            .path()
            .join(".m.bundle.0123456789abcdef0123456789abcdef.tmp");
        let fresh = dir.path().join(".m.bundle.99.1.tmp");
        for p in [&stale, &fresh] {
            std::fs::write(p, b"partial").unwrap();
        }
        let old = std::time::SystemTime::now() - STALE_TMP_AGE * 2;
        File::options()
            .write(true)
            .open(&stale)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let writer = BundleWriter::create(&target).unwrap();
        assert!(!stale.exists());
        assert!(fresh.exists());
        writer.finish().unwrap();
    }
}
