//! `Bundle` and `open_bundle`, plus the bodies of the `Store` methods that
//! move entries to and from bundles, trim the store and report its usage.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::RwLock;

use pyo3::prelude::*;

use super::reports::{BundleStats, BundleVerifyReport, ExportReport, ImportReport};
use super::{parse_digest, progress, PyBlob, GIL_RELEASE_MIN};
use crate::bundle::sign::TRUSTED_KEYS_ENV;
use crate::bundle::{Bundle, SecretKey, TrustedKeys};
use crate::error::Error;
use crate::hash::{hash_bytes, Digest};
use crate::store::{Blob, Manifest, Store};

fn raw_digest(hex: &str) -> PyResult<[u8; 32]> {
    Ok(*parse_digest(hex)?.as_bytes())
}

fn hex(raw: &[u8; 32]) -> String {
    Digest::from(blake3::Hash::from_bytes(*raw)).to_hex()
}

/// The keys a call trusts: those given, else `$PRECOMPILE_TRUSTED_KEYS`;
/// `None` when neither names any, and no signature is then required.
fn resolve_trust(keys: Option<Vec<PathBuf>>) -> Result<Option<TrustedKeys>, Error> {
    match keys {
        None => TrustedKeys::from_env(),
        Some(keys) => {
            let specs = keys
                .iter()
                .map(|k| {
                    k.to_str().map(str::to_owned).ok_or_else(|| {
                        Error::InvalidKey(format!("{} is not valid UTF-8", k.display()))
                    })
                })
                .collect::<Result<Vec<_>, Error>>()?;
            TrustedKeys::from_specs(&specs).map(Some)
        }
    }
}

/// The opt-in that lets a reader with no trusted keys accept what nobody signed.
const ALLOW_UNSIGNED_ENV: &str = "PRECOMPILE_ALLOW_UNSIGNED";

fn allow_unsigned_from_env() -> bool {
    std::env::var(ALLOW_UNSIGNED_ENV).is_ok_and(|v| v.trim() == "1")
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
    // Turned on for good once a signature is relied on (`check_trusted`): the
    // signature vouches for blobs only through their digests.
    verify: AtomicBool,
    verified: RwLock<HashSet<[u8; 32]>>,
    gets: AtomicU64,
    misses: AtomicU64,
}

impl PyBundle {
    fn check(&self, raw: &[u8; 32], bytes: &[u8]) -> Result<(), Error> {
        if !self.verify.load(Ordering::Acquire)
            || self.verified.read().expect("not poisoned").contains(raw)
        {
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

    /// The public key (`ed25519:<hex>`) whose valid signature the bundle
    /// carries, or None when it is unsigned.
    #[getter]
    fn signer(&self) -> Option<String> {
        self.bundle.signer().map(|k| k.to_string())
    }

    /// Raises UntrustedError unless the bundle is signed by one of
    /// `trusted_keys` (default: $PRECOMPILE_TRUSTED_KEYS; when that is unset
    /// too, nothing is required). Once a signature passed, every blob is
    /// hashed before it is served, whatever `verify` said.
    #[pyo3(signature = (trusted_keys = None))]
    fn check_trusted(&self, trusted_keys: Option<Vec<PathBuf>>) -> PyResult<()> {
        if let Some(trust) = resolve_trust(trusted_keys)? {
            trust.check(self.bundle.signer(), self.bundle.path())?;
            // Trust established by a signature: from now on every blob is hashed
            // before it is served, whatever `verify` the bundle was opened with.
            self.verify.store(true, Ordering::Release);
        }
        Ok(())
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
    /// a `BundleVerifyReport`. `progress(done, total)` is called with
    /// bytes hashed while it runs.
    #[pyo3(signature = (parallel = true, *, progress = None))]
    fn verify<'py>(
        &self,
        py: Python<'py>,
        parallel: bool,
        progress: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<BundleVerifyReport> {
        let r = progress::run(py, progress, |p| self.bundle.verify_all_with(parallel, p))?;
        let corrupt: HashSet<[u8; 32]> = r.corrupt.iter().copied().collect();
        self.mark_verified(
            self.bundle
                .digests()
                .filter(|d| !corrupt.contains(*d))
                .copied(),
        );
        Ok(r.into())
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
    fn stats(&self) -> BundleStats {
        BundleStats::of(
            &self.bundle,
            self.gets.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
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
///
/// `trusted_keys` (public keys `ed25519:<hex>` or files of them; default:
/// $PRECOMPILE_TRUSTED_KEYS) makes a signature by one of them required: an
/// unsigned bundle, one signed by another key, or one changed after signing
/// raises UntrustedError here, before anything of it is used. Blobs of a
/// trusted bundle are always verified when read, whatever `verify` says.
#[pyfunction]
#[pyo3(signature = (path, *, verify = true, trusted_keys = None))]
pub fn open_bundle(
    py: Python<'_>,
    path: PathBuf,
    verify: bool,
    trusted_keys: Option<Vec<PathBuf>>,
) -> PyResult<PyBundle> {
    let trust = resolve_trust(trusted_keys)?;
    // The signature vouches for blobs only through their digests.
    let verify = verify || trust.is_some();
    let bundle = py.detach(|| Bundle::open_trusted(&path, trust.as_ref()))?;
    Ok(PyBundle {
        bundle,
        verify: AtomicBool::new(verify),
        verified: RwLock::new(HashSet::new()),
        gets: AtomicU64::new(0),
        misses: AtomicU64::new(0),
    })
}

/// Writes a new secret key to `path` (mode 0600; an existing file is never
/// overwritten) and returns its public key, `ed25519:<64 hex>`.
#[pyfunction]
pub fn keygen(path: PathBuf) -> PyResult<String> {
    Ok(SecretKey::generate(&path)?.public().to_string())
}

/// The public key, `ed25519:<64 hex>`, of the secret key file at `path`
/// (the secret itself never leaves the file).
#[pyfunction]
pub fn public_key(path: PathBuf) -> PyResult<String> {
    Ok(SecretKey::load(&path)?.public().to_string())
}

/// `Store.export_bundle`: all refs when `refs` is None.
pub(super) fn export<'py>(
    py: Python<'py>,
    store: &Store,
    refs: Option<Vec<String>>,
    path: PathBuf,
    callback: Option<&Bound<'py, PyAny>>,
    sign_with: Option<PathBuf>,
) -> PyResult<ExportReport> {
    // Load the key first: a bad key file must not cost a whole export.
    let key = sign_with.map(|k| SecretKey::load(&k)).transpose()?;
    let summary = progress::run(py, callback, |p| {
        let names = match refs {
            Some(names) => names,
            None => store.refs("")?,
        };
        store.export_bundle_with(&names, &path, key.as_ref(), p)
    })?;
    Ok(summary.into())
}

/// `Store.import_bundle`.
pub(super) fn import<'py>(
    py: Python<'py>,
    store: &Store,
    path: PathBuf,
    callback: Option<&Bound<'py, PyAny>>,
    trusted_keys: Option<Vec<PathBuf>>,
    allow_unsigned: Option<bool>,
) -> PyResult<ImportReport> {
    let trust = resolve_trust(trusted_keys)?;
    let allow_unsigned = allow_unsigned.unwrap_or_else(allow_unsigned_from_env);
    if trust.is_none() && !allow_unsigned {
        return Err(Error::Untrusted(format!(
            "{}: no trusted keys are configured, so no bundle is trusted; pass trusted_keys \
             (or set ${TRUSTED_KEYS_ENV}), or allow_unsigned=True ({ALLOW_UNSIGNED_ENV}=1) to import it unchecked",
            path.display()
        ))
        .into());
    }
    let r = progress::run(py, callback, |p| {
        store.import_bundle_with(&path, trust.as_ref(), p)
    })?;
    Ok(r.into())
}
