//! The Python binding, `precompile._core`: the only file that touches PyO3.
//!
//! Every call that hashes, does file I/O, fsyncs or may wait for a lock runs
//! inside `py.detach`, so other Python threads keep running meanwhile.

use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::error::Error;
use crate::hash::{hash_bytes, Digest};
use crate::store::{Options, Store};

mod blob;
mod bundle;
mod errors;
mod progress;
mod refsig;
mod reports;

use blob::{with_buffer, PyBlob};
use reports::{EvictReport, ExportReport, GcReport, ImportReport, Stats, Usage, VerifyReport};

create_exception!(
    precompile._core,
    StoreError,
    PyException,
    "Base class of every error the store raises."
);
create_exception!(
    precompile._core,
    CorruptObjectError,
    StoreError,
    "An object's content does not hash to its name (a flipped byte, a truncation)."
);
create_exception!(
    precompile._core,
    MissingObjectError,
    StoreError,
    "An object is not in the store."
);
create_exception!(
    precompile._core,
    LockTimeout,
    StoreError,
    "The store's GC lock could not be taken before the lock timeout."
);
create_exception!(
    precompile._core,
    FormatError,
    StoreError,
    "A store or manifest is in a format this build does not understand."
);
create_exception!(
    precompile._core,
    RefConflictError,
    StoreError,
    "Refs of a bundle that could not be set in this store; every other ref was set. \
     `conflicts` lists (name, reason) pairs."
);
create_exception!(
    precompile._core,
    UntrustedError,
    StoreError,
    "A bundle that is unsigned where a trusted signature is required, signed by a key \
     that is not trusted, or changed after signing; or a store owned or writable by \
     another user. Nothing of it was read."
);

/// Inputs shorter than this are hashed without releasing the GIL: for them,
/// releasing and re-taking it costs more than the hashing (blake3-py's
/// threshold).
const GIL_RELEASE_MIN: usize = 2048;

impl From<Error> for PyErr {
    fn from(err: Error) -> PyErr {
        let msg = err.to_string();
        match err {
            Error::Io { path, source } => errors::os_error(&path, &source),
            Error::Corrupt { .. } => CorruptObjectError::new_err(msg),
            Error::Missing { .. } => MissingObjectError::new_err(msg),
            Error::LockTimeout { .. } => LockTimeout::new_err(msg),
            Error::Format(_) => FormatError::new_err(msg),
            Error::InvalidName(_) => errors::raise(|c| &c.invalid_name, msg),
            Error::InvalidDigest(_) => errors::raise(|c| &c.invalid_digest, msg),
            Error::NoSuchRef(_) => errors::raise(|c| &c.ref_not_found, msg),
            Error::RefConflicts(conflicts) => Python::attach(|py| {
                let err = RefConflictError::new_err(msg);
                // Best effort: the message names the refs as well.
                let _ = err.value(py).setattr("conflicts", conflicts);
                err
            }),
            Error::Untrusted(_) => UntrustedError::new_err(msg),
            Error::InvalidKey(_) => PyValueError::new_err(msg),
            Error::Changed(_) => StoreError::new_err(msg),
        }
    }
}

/// Refuses integers JSON would not keep exactly: serde_json reads an
/// integer outside -2**63 .. 2**64-1 back as a float, silently.
fn check_exact_ints(value: &Bound<'_, PyAny>, depth: usize) -> PyResult<()> {
    use pyo3::types::{PyBool, PyInt, PyList, PyTuple};
    // Deeper nesting is json.dumps' to refuse (RecursionError).
    if depth > 256 || value.is_instance_of::<PyBool>() {
        return Ok(());
    }
    if value.is_instance_of::<PyInt>() {
        if value.extract::<i64>().is_ok() || value.extract::<u64>().is_ok() {
            return Ok(());
        }
        return Err(FormatError::new_err(format!(
            "manifest metadata integer {value} is outside -2**63 .. 2**64-1 and would not \
             be kept exactly; store it as a string"
        )));
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        for (_, item) in dict.iter() {
            check_exact_ints(&item, depth + 1)?;
        }
    } else if let Ok(list) = value.cast::<PyList>() {
        for item in list.iter() {
            check_exact_ints(&item, depth + 1)?;
        }
    } else if let Ok(tuple) = value.cast::<PyTuple>() {
        for item in tuple.iter() {
            check_exact_ints(&item, depth + 1)?;
        }
    }
    Ok(())
}

fn parse_digest(hex: &str) -> PyResult<Digest> {
    Ok(Digest::from_hex(hex)?)
}

fn seconds(value: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        PyValueError::new_err(format!("{what} must be a finite number >= 0, got {value}"))
    })
}

/// A content-addressed store of blobs, named by their blake3 digest.
#[pyclass(frozen, module = "precompile._core", name = "Store")]
pub struct PyStore {
    inner: Store,
}

impl PyStore {
    fn put_buffer(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<(String, bool)> {
        let store = &self.inner;
        with_buffer(data, |bytes, immutable| {
            let (digest, new) = if bytes.len() < GIL_RELEASE_MIN {
                // Small: hash with the GIL held, and copy a mutable input
                // while no Python thread can be writing it.
                let owned;
                let bytes = if immutable {
                    bytes
                } else {
                    owned = bytes.to_vec();
                    &owned[..]
                };
                let digest = hash_bytes(bytes);
                (
                    digest,
                    py.detach(|| store.put_hashed(&digest, bytes, false))?,
                )
            } else {
                py.detach(|| {
                    let digest = hash_bytes(bytes);
                    // A mutable input may change under us: recheck the bytes
                    // as written rather than install a misnamed object.
                    store
                        .put_hashed(&digest, bytes, !immutable)
                        .map(|new| (digest, new))
                })?
            };
            Ok((digest.to_hex(), new))
        })
    }
}

#[pymethods]
impl PyStore {
    /// Opens the store at `path`, creating it unless `create=False`. A store
    /// owned by another user or writable by others raises UntrustedError
    /// unless `shared=True` (then a setgid directory writable by one of your
    /// groups, or another user's store, is accepted; never a world-writable one).
    #[new]
    #[pyo3(signature = (path, *, verify = true, create = true, lock_timeout = 30.0, shared = false))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        verify: bool,
        create: bool,
        lock_timeout: f64,
        shared: bool,
    ) -> PyResult<Self> {
        let options = Options {
            verify,
            create,
            shared,
            lock_timeout: seconds(lock_timeout, "lock_timeout")?,
            ..Options::default()
        };
        let inner = py.detach(|| Store::open(&path, options))?;
        Ok(PyStore { inner })
    }

    /// The store root, absolute.
    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.path().to_path_buf()
    }

    /// Stores any C-contiguous buffer and returns its digest.
    fn put(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<String> {
        Ok(self.put_buffer(py, data)?.0)
    }

    /// Like `put`, also saying whether the content was new.
    fn put_with_status(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<(String, bool)> {
        self.put_buffer(py, data)
    }

    /// Stores a file's content, streaming it, and returns its digest.
    fn put_file(&self, py: Python<'_>, path: PathBuf) -> PyResult<String> {
        Ok(py.detach(|| self.inner.put_file(&path))?.digest.to_hex())
    }

    /// Maps the object named `digest` (verified unless opened with verify=False).
    fn get(&self, py: Python<'_>, digest: &str) -> PyResult<PyBlob> {
        let digest = parse_digest(digest)?;
        Ok(PyBlob {
            blob: py.detach(|| self.inner.get(&digest))?,
        })
    }

    /// Maps several objects at once (in parallel when there are many), each
    /// verified unless opened with verify=False; in the order given.
    fn get_many(&self, py: Python<'_>, digests: Vec<String>) -> PyResult<Vec<PyBlob>> {
        let digests = digests
            .iter()
            .map(|d| parse_digest(d))
            .collect::<PyResult<Vec<_>>>()?;
        let blobs = py.detach(|| self.inner.get_many(&digests))?;
        Ok(blobs.into_iter().map(|blob| PyBlob { blob }).collect())
    }

    /// Whether the object named `digest` is stored.
    fn contains(&self, py: Python<'_>, digest: &str) -> PyResult<bool> {
        let digest = parse_digest(digest)?;
        Ok(py.detach(|| self.inner.contains(&digest))?)
    }

    /// Whether the object named `digest` starts like a manifest (not
    /// verified). Never blocks: anything but a regular file at its path
    /// raises CorruptObjectError, an absent one MissingObjectError.
    fn is_manifest(&self, py: Python<'_>, digest: &str) -> PyResult<bool> {
        let digest = parse_digest(digest)?;
        Ok(py.detach(|| self.inner.is_manifest(&digest))?)
    }

    /// The size in bytes of the object named `digest` (not verified); raises
    /// like `is_manifest`.
    fn size(&self, py: Python<'_>, digest: &str) -> PyResult<u64> {
        let digest = parse_digest(digest)?;
        Ok(py.detach(|| self.inner.object_size(&digest))?)
    }

    /// Where the object named `digest` lives (whether or not it exists).
    fn object_path(&self, digest: &str) -> PyResult<String> {
        Ok(self
            .inner
            .object_path(&parse_digest(digest)?)
            .display()
            .to_string())
    }

    /// Points ref `name` at the stored object `digest`, atomically.
    fn set_ref(&self, py: Python<'_>, name: &str, digest: &str) -> PyResult<()> {
        let digest = parse_digest(digest)?;
        Ok(py.detach(|| self.inner.set_ref(name, &digest))?)
    }

    /// The digest ref `name` points at, or None.
    fn get_ref(&self, py: Python<'_>, name: &str) -> PyResult<Option<String>> {
        Ok(py.detach(|| self.inner.get_ref(name))?.map(|d| d.to_hex()))
    }

    /// Removes ref `name`; False when it did not exist.
    fn delete_ref(&self, py: Python<'_>, name: &str) -> PyResult<bool> {
        Ok(py.detach(|| self.inner.delete_ref(name))?)
    }

    /// Ref names starting with `prefix`, sorted.
    #[pyo3(signature = (prefix = ""))]
    fn refs(&self, py: Python<'_>, prefix: &str) -> PyResult<Vec<String>> {
        Ok(py.detach(|| self.inner.refs(prefix))?)
    }

    /// Sets ref `name`'s mtime to now; False when it does not exist.
    fn touch_ref(&self, py: Python<'_>, name: &str) -> PyResult<bool> {
        Ok(py.detach(|| self.inner.touch_ref(name))?)
    }

    /// Ref `name`'s mtime in seconds since the epoch, or None.
    fn ref_mtime(&self, py: Python<'_>, name: &str) -> PyResult<Option<f64>> {
        let mtime = py.detach(|| self.inner.ref_mtime(name))?;
        Ok(mtime.map(|t| {
            t.duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64()
        }))
    }

    /// Stores a manifest listing `children` (which must be stored) with JSON
    /// metadata `meta`, and returns its digest.
    #[pyo3(signature = (children, meta = None))]
    fn put_manifest(
        &self,
        py: Python<'_>,
        children: Vec<String>,
        meta: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<String> {
        let children = children
            .iter()
            .map(|c| parse_digest(c))
            .collect::<PyResult<Vec<_>>>()?;
        let meta = match meta {
            None => serde_json::Map::new(),
            Some(meta) if meta.is_instance_of::<PyDict>() => {
                check_exact_ints(meta, 0)?;
                let kwargs = PyDict::new(py);
                kwargs.set_item("allow_nan", false)?;
                let text: String = py
                    .import("json")?
                    .call_method("dumps", (meta,), Some(&kwargs))?
                    .extract()?;
                serde_json::from_str(&text).map_err(|e| PyValueError::new_err(e.to_string()))?
            }
            Some(other) => {
                return Err(PyTypeError::new_err(format!(
                    "meta must be a dict or None, not {}",
                    other.get_type().name()?
                )))
            }
        };
        Ok(py
            .detach(|| self.inner.put_manifest(&children, meta))?
            .digest
            .to_hex())
    }

    /// Reads the manifest `digest`: (children, meta).
    fn get_manifest<'py>(
        &self,
        py: Python<'py>,
        digest: &str,
    ) -> PyResult<(Vec<String>, Bound<'py, PyAny>)> {
        let digest = parse_digest(digest)?;
        let manifest = py.detach(|| self.inner.get_manifest(&digest))?;
        let text = serde_json::to_string(&manifest.meta).expect("JSON values always serialize");
        let meta = py.import("json")?.call_method1("loads", (text,))?;
        Ok((manifest.children.iter().map(Digest::to_hex).collect(), meta))
    }

    /// Sweeps objects no ref reaches that are older than `grace_seconds`.
    #[pyo3(signature = (dry_run = false, grace_seconds = 3600.0))]
    fn gc<'py>(&self, py: Python<'py>, dry_run: bool, grace_seconds: f64) -> PyResult<GcReport> {
        let grace = seconds(grace_seconds, "grace_seconds")?;
        Ok(py.detach(|| self.inner.gc(dry_run, grace))?.into())
    }

    /// Rehashes every object and checks that everything refs reach exists.
    /// `progress(done, total)` is called with bytes hashed while it runs.
    #[pyo3(signature = (*, progress = None))]
    fn verify<'py>(
        &self,
        py: Python<'py>,
        progress: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<VerifyReport> {
        Ok(progress::run(py, progress, |p| self.inner.verify_with(p))?.into())
    }

    /// Objects, bytes and refs on disk; puts, gets and dedup hits since open.
    fn stats(&self, py: Python<'_>) -> PyResult<Stats> {
        Ok(py.detach(|| self.inner.stats())?.into())
    }

    /// Writes refs `refs` (None: all) and everything they reach to one
    /// bundle file at `path`, signed with the secret key file `sign_with`
    /// when given: an `ExportReport`.
    #[pyo3(signature = (refs, path, *, progress = None, sign_with = None))]
    fn export_bundle<'py>(
        &self,
        py: Python<'py>,
        refs: Option<Vec<String>>,
        path: PathBuf,
        progress: Option<&Bound<'py, PyAny>>,
        sign_with: Option<PathBuf>,
    ) -> PyResult<ExportReport> {
        bundle::export(py, &self.inner, refs, path, progress, sign_with)
    }

    /// Unpacks the bundle at `path` (idempotent, deduplicating): an
    /// `ImportReport`. With `trusted_keys`
    /// (default: $PRECOMPILE_TRUSTED_KEYS), a bundle not signed by one of
    /// them raises UntrustedError before anything is written. With no trusted
    /// key configured, every bundle is refused unless `allow_unsigned`
    /// (default: $PRECOMPILE_ALLOW_UNSIGNED=1).
    #[pyo3(signature = (path, *, progress = None, trusted_keys = None, allow_unsigned = None))]
    fn import_bundle<'py>(
        &self,
        py: Python<'py>,
        path: PathBuf,
        progress: Option<&Bound<'py, PyAny>>,
        trusted_keys: Option<Vec<PathBuf>>,
        allow_unsigned: Option<bool>,
    ) -> PyResult<ImportReport> {
        bundle::import(
            py,
            &self.inner,
            path,
            progress,
            trusted_keys,
            allow_unsigned,
        )
    }

    /// Deletes least recently used refs until the store fits in `max_size`
    /// bytes, then sweeps like `gc`.
    #[pyo3(signature = (max_size, *, dry_run = false, grace_seconds = 3600.0))]
    fn evict<'py>(
        &self,
        py: Python<'py>,
        max_size: u64,
        dry_run: bool,
        grace_seconds: f64,
    ) -> PyResult<EvictReport> {
        let grace = seconds(grace_seconds, "grace_seconds")?;
        Ok(py
            .detach(|| self.inner.evict(max_size, dry_run, grace))?
            .into())
    }

    /// Each ref's closure size and the store's totals.
    fn usage(&self, py: Python<'_>) -> PyResult<Usage> {
        Ok(py.detach(|| self.inner.usage())?.into())
    }

    fn __repr__(&self) -> String {
        format!("Store('{}')", self.inner.path().display())
    }
}

/// precompile's store core, implemented in Rust.
#[pymodule]
mod _core {
    #[pymodule_export]
    use super::blob::blake3_hex;
    #[pymodule_export]
    use super::bundle::{keygen, open_bundle, public_key, PyBundle};
    #[pymodule_export]
    use super::refsig::{PySigningKey, PyTrustedKeys};
    #[pymodule_export]
    use super::reports::{
        BundleStats, BundleVerifyReport, EvictReport, ExportReport, GcReport, ImportReport,
        RefUsage, Stats, Usage, VerifyReport,
    };
    #[pymodule_export]
    use super::{
        CorruptObjectError, FormatError, LockTimeout, MissingObjectError, PyBlob, PyStore,
        RefConflictError, StoreError, UntrustedError,
    };

    #[pymodule_init]
    fn init(module: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
        super::errors::register(module)
    }

    /// The package version.
    #[allow(non_upper_case_globals)]
    #[pymodule_export]
    const __version__: &str = env!("CARGO_PKG_VERSION");
}
