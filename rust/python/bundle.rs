//! `Bundle` and `open_bundle`, plus the bodies of the `Store` methods that
//! move entries to and from bundles, trim the store and report its usage.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::{Duration, UNIX_EPOCH};

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::{parse_digest, progress, PyBlob, GIL_RELEASE_MIN};
use crate::bundle::Bundle;
use crate::error::Error;
use crate::hash::{hash_bytes, Digest};
use crate::store::{Blob, Manifest, Store};

fn raw_digest(hex: &str) -> PyResult<[u8; 32]> {
    Ok(*parse_digest(hex)?.as_bytes())
}

fn hex(raw: &[u8; 32]) -> String {
    Digest::from(blake3::Hash::from_bytes(*raw)).to_hex()
}

fn missing(raw: &[u8; 32]) -> Error {
    Error::Missing {
        digest: blake3::Hash::from_bytes(*raw).into(),
    }
}

/// `(children, meta)` as Python objects; meta goes through `json`, so it
/// comes back exactly as `json.loads` would build it.
pub(super) fn manifest_to_py<'py>(
    py: Python<'py>,
    manifest: &Manifest,
) -> PyResult<(Vec<String>, Bound<'py, PyAny>)> {
    let text = serde_json::to_string(&manifest.meta).expect("JSON values always serialize");
    let meta = py.import("json")?.call_method1("loads", (text,))?;
    Ok((manifest.children.iter().map(Digest::to_hex).collect(), meta))
}

/// A bundle file mapped read-only: blobs are served from the mapping
/// without copying, and refs and the index are looked up in place.
///
/// Safe to share between threads. With `verify` (the default), each blob is
/// checked against its digest the first time it is read through this
/// handle (`get`, `verify`, `verify_blobs`), and trusted afterwards.
#[pyclass(frozen, module = "precompile._core", name = "Bundle")]
pub struct PyBundle {
    bundle: Bundle,
    verify: bool,
    verified: RwLock<HashSet<[u8; 32]>>,
    gets: AtomicU64,
    misses: AtomicU64,
}

impl PyBundle {
    fn check(&self, raw: &[u8; 32], bytes: &[u8]) -> Result<(), Error> {
        if !self.verify || self.verified.read().expect("not poisoned").contains(raw) {
            return Ok(());
        }
        if hash_bytes(bytes).as_bytes() != raw {
            return Err(Error::Corrupt {
                digest: blake3::Hash::from_bytes(*raw).into(),
            });
        }
        self.verified.write().expect("not poisoned").insert(*raw);
        Ok(())
    }

    fn mark_verified(&self, raws: impl IntoIterator<Item = [u8; 32]>) {
        self.verified.write().expect("not poisoned").extend(raws);
    }
}

#[pymethods]
impl PyBundle {
    /// The path the bundle was opened from.
    #[getter]
    fn path(&self) -> PathBuf {
        self.bundle.path().to_path_buf()
    }

    /// Whether the bundle holds the blob `digest`.
    fn contains(&self, digest: &str) -> PyResult<bool> {
        Ok(self.bundle.contains(&raw_digest(digest)?))
    }

    /// The blob `digest`, straight from the mapping (checked first, with verify).
    fn get(&self, py: Python<'_>, digest: &str) -> PyResult<PyBlob> {
        let raw = raw_digest(digest)?;
        let Some(view) = self.bundle.view(&raw) else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return Err(missing(&raw).into());
        };
        if view.len() < GIL_RELEASE_MIN {
            self.check(&raw, &view)?;
        } else {
            py.detach(|| self.check(&raw, &view))?;
        }
        self.gets.fetch_add(1, Ordering::Relaxed);
        let digest = blake3::Hash::from_bytes(raw).into();
        Ok(PyBlob {
            blob: Blob::from_view(digest, view),
        })
    }

    /// The size of the blob `digest` in bytes, without reading it.
    fn size(&self, digest: &str) -> PyResult<usize> {
        let raw = raw_digest(digest)?;
        let (_, len) = self.bundle.locate(&raw).ok_or_else(|| missing(&raw))?;
        Ok(len)
    }

    /// Reads the manifest `digest`: (children, meta).
    fn get_manifest<'py>(
        &self,
        py: Python<'py>,
        digest: &str,
    ) -> PyResult<(Vec<String>, Bound<'py, PyAny>)> {
        let raw = raw_digest(digest)?;
        let manifest = py.detach(|| self.bundle.manifest(&raw))?;
        manifest_to_py(py, &manifest)
    }

    /// Every blob `digest` reaches through manifests, itself first.
    fn closure(&self, py: Python<'_>, digest: &str) -> PyResult<Vec<String>> {
        let raw = raw_digest(digest)?;
        let order = py.detach(|| self.bundle.closure(&raw))?;
        Ok(order.iter().map(hex).collect())
    }

    /// The digest ref `name` points at, or None.
    fn get_ref(&self, name: &str) -> Option<String> {
        self.bundle.get_ref(name).map(hex)
    }

    /// Ref names starting with `prefix`, sorted.
    #[pyo3(signature = (prefix = ""))]
    fn refs(&self, prefix: &str) -> Vec<String> {
        let refs = self.bundle.refs().iter().map(|(name, _)| name);
        refs.filter(|n| n.starts_with(prefix)).cloned().collect()
    }

    /// Every blob digest, sorted.
    fn digests(&self) -> Vec<String> {
        self.bundle.digests().map(hex).collect()
    }

    fn __len__(&self) -> usize {
        self.bundle.len()
    }

    /// Hashes every blob (in parallel by default, without the GIL):
    /// {blobs, bytes, corrupt, ok}. `progress(done, total)` is called with
    /// bytes hashed while it runs.
    #[pyo3(signature = (parallel = true, *, progress = None))]
    fn verify<'py>(
        &self,
        py: Python<'py>,
        parallel: bool,
        progress: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let r = progress::run(py, progress, |p| self.bundle.verify_all_with(parallel, p))?;
        let corrupt: HashSet<[u8; 32]> = r.corrupt.iter().copied().collect();
        self.mark_verified(
            self.bundle
                .digests()
                .filter(|d| !corrupt.contains(*d))
                .copied(),
        );
        let d = PyDict::new(py);
        d.set_item("blobs", r.blobs)?;
        d.set_item("bytes", r.bytes)?;
        d.set_item("corrupt", r.corrupt.iter().map(hex).collect::<Vec<_>>())?;
        d.set_item("ok", r.corrupt.is_empty())?;
        Ok(d)
    }

    /// Hashes the given blobs in parallel, without the GIL, and returns those
    /// that do not match their digest; the rest count as verified.
    fn verify_blobs(&self, py: Python<'_>, digests: Vec<String>) -> PyResult<Vec<String>> {
        let raws = digests
            .iter()
            .map(|d| raw_digest(d))
            .collect::<PyResult<Vec<_>>>()?;
        let corrupt = py.detach(|| self.bundle.verify_blobs(&raws, true))?;
        let bad: HashSet<&[u8; 32]> = corrupt.iter().collect();
        self.mark_verified(raws.iter().filter(|r| !bad.contains(r)).copied());
        Ok(corrupt.iter().map(hex).collect())
    }

    /// Asks the kernel to read the given blobs ahead (madvise WILLNEED).
    fn prefetch(&self, py: Python<'_>, digests: Vec<String>) -> PyResult<()> {
        let raws = digests
            .iter()
            .map(|d| raw_digest(d))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(py.detach(|| self.bundle.prefetch(&raws))?)
    }

    /// Blobs, bytes (of the file) and refs; gets and misses since open.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("blobs", self.bundle.len())?;
        d.set_item("bytes", self.bundle.file_len())?;
        d.set_item("refs", self.bundle.refs().len())?;
        d.set_item("gets", self.gets.load(Ordering::Relaxed))?;
        d.set_item("misses", self.misses.load(Ordering::Relaxed))?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "Bundle('{}', blobs={}, refs={})",
            self.bundle.path().display(),
            self.bundle.len(),
            self.bundle.refs().len()
        )
    }
}

/// Maps the bundle at `path` read-only after validating its metadata
/// (FormatError if malformed). With `verify`, each blob is checked against
/// its digest the first time it is read.
#[pyfunction]
#[pyo3(signature = (path, *, verify = true))]
pub fn open_bundle(py: Python<'_>, path: PathBuf, verify: bool) -> PyResult<PyBundle> {
    let bundle = py.detach(|| Bundle::open(&path))?;
    Ok(PyBundle {
        bundle,
        verify,
        verified: RwLock::new(HashSet::new()),
        gets: AtomicU64::new(0),
        misses: AtomicU64::new(0),
    })
}

/// `Store.export_bundle`: all refs when `refs` is None.
pub(super) fn export<'py>(
    py: Python<'py>,
    store: &Store,
    refs: Option<Vec<String>>,
    path: PathBuf,
    callback: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let summary = progress::run(py, callback, |p| {
        let names = match refs {
            Some(names) => names,
            None => store.refs("")?,
        };
        store.export_bundle_with(&names, &path, p)
    })?;
    let d = PyDict::new(py);
    d.set_item("blobs", summary.blobs)?;
    d.set_item("refs", summary.refs)?;
    d.set_item("bytes", summary.bytes)?;
    Ok(d)
}

/// `Store.import_bundle`.
pub(super) fn import<'py>(
    py: Python<'py>,
    store: &Store,
    path: PathBuf,
    callback: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let r = progress::run(py, callback, |p| store.import_bundle_with(&path, p))?;
    let d = PyDict::new(py);
    d.set_item("objects_new", r.objects_new)?;
    d.set_item("objects_present", r.objects_present)?;
    d.set_item("bytes_new", r.bytes_new)?;
    d.set_item("refs", r.refs)?;
    d.set_item("refs_changed", r.refs_changed)?;
    d.set_item("objects_repaired", r.objects_repaired)?;
    Ok(d)
}

/// `Store.evict`: the GC report plus what eviction did.
pub(super) fn evict<'py>(
    py: Python<'py>,
    store: &Store,
    max_size: u64,
    dry_run: bool,
    grace: Duration,
) -> PyResult<Bound<'py, PyDict>> {
    let r = py.detach(|| store.evict(max_size, dry_run, grace))?;
    let d = PyDict::new(py);
    d.set_item("refs_evicted", r.refs_evicted)?;
    d.set_item("bytes_before", r.bytes_before)?;
    d.set_item("bytes_after", r.bytes_after)?;
    d.set_item("objects_freed", r.gc.objects_freed)?;
    d.set_item("bytes_freed", r.gc.bytes_freed)?;
    d.set_item("objects_kept", r.gc.objects_kept)?;
    d.set_item("tmp_freed", r.gc.tmp_freed)?;
    d.set_item("dry_run", r.gc.dry_run)?;
    Ok(d)
}

/// `Store.usage`.
pub(super) fn usage<'py>(py: Python<'py>, store: &Store) -> PyResult<Bound<'py, PyDict>> {
    let u = py.detach(|| store.usage())?;
    let list = u
        .refs
        .iter()
        .map(|r| {
            let item = PyDict::new(py);
            item.set_item("name", &r.name)?;
            item.set_item("digest", r.digest.to_hex())?;
            let mtime = r.mtime.map(|t| {
                let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                since.as_secs_f64()
            });
            item.set_item("mtime", mtime)?;
            item.set_item("objects", r.objects)?;
            item.set_item("bytes", r.bytes)?;
            item.set_item("unique_bytes", r.unique_bytes)?;
            item.set_item("missing", r.missing)?;
            Ok(item)
        })
        .collect::<PyResult<Vec<_>>>()?;
    let d = PyDict::new(py);
    d.set_item("refs", list)?;
    d.set_item("objects", u.objects)?;
    d.set_item("bytes", u.bytes)?;
    d.set_item("reachable_bytes", u.reachable_bytes)?;
    d.set_item("logical_bytes", u.logical_bytes)?;
    Ok(d)
}
