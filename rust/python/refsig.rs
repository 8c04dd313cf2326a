//! Signed remote refs: `SigningKey` signs a ref on the host that pushes it, and
//! `TrustedKeys` checks one on the host that reads it (docs/FORMAT.md, signed refs).
//!
//! Both hold their keys parsed, so a reader pays one ed25519 verification per ref and
//! nothing else.

use std::path::PathBuf;

use pyo3::prelude::*;

use super::parse_digest;
use crate::bundle::sign::{parse_hex64, to_hex};
use crate::bundle::{PublicKey, SecretKey, TrustedKeys};
use crate::error::Error;

/// A secret key loaded from a key file (`precompile.keygen`), to sign refs with.
/// Refuses a file other users may read, as ssh does.
#[pyclass(frozen, module = "precompile._core", name = "SigningKey")]
pub struct PySigningKey {
    key: SecretKey,
}

#[pymethods]
impl PySigningKey {
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let key = py.detach(|| SecretKey::load(&path))?;
        Ok(PySigningKey { key })
    }

    /// The public half, `ed25519:<64 hex>`.
    #[getter]
    fn public(&self) -> String {
        self.key.public().to_string()
    }

    /// The signature (128 hex digits) of ref `name` pointing at `digest`.
    fn sign_ref(&self, name: &str, digest: &str) -> PyResult<String> {
        let raw = *parse_digest(digest)?.as_bytes();
        Ok(to_hex(&self.key.sign_ref(name, &raw)))
    }

    fn __repr__(&self) -> String {
        format!("SigningKey({})", self.key.public())
    }
}

/// The public keys a reader trusts, parsed once: public keys `ed25519:<hex>` or files
/// of them (a file other users may write is refused).
#[pyclass(frozen, module = "precompile._core", name = "TrustedKeys")]
pub struct PyTrustedKeys {
    keys: TrustedKeys,
}

#[pymethods]
impl PyTrustedKeys {
    #[new]
    fn new(py: Python<'_>, keys: Vec<PathBuf>) -> PyResult<Self> {
        let specs = keys
            .iter()
            .map(|k| {
                k.to_str()
                    .map(str::to_owned)
                    .ok_or_else(|| Error::InvalidKey(format!("{} is not valid UTF-8", k.display())))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let keys = py.detach(|| TrustedKeys::from_specs(&specs))?;
        Ok(PyTrustedKeys { keys })
    }

    /// The keys of `$PRECOMPILE_TRUSTED_KEYS`, or None when it names none.
    #[staticmethod]
    fn from_env(py: Python<'_>) -> PyResult<Option<PyTrustedKeys>> {
        let keys = py.detach(TrustedKeys::from_env)?;
        Ok(keys.map(|keys| PyTrustedKeys { keys }))
    }

    /// The keys, `ed25519:<hex>`, in the order given.
    #[getter]
    fn keys(&self) -> Vec<String> {
        self.keys.keys().iter().map(|k| k.to_string()).collect()
    }

    fn __len__(&self) -> usize {
        self.keys.keys().len()
    }

    /// The signer when `signature` (128 hex digits) by `signer` (`ed25519:<hex>`) is a
    /// valid signature of ref `name` pointing at `digest` and `signer` is trusted;
    /// None otherwise. Never raises for malformed input: a malformed signature is no
    /// signature.
    fn verify_ref(
        &self,
        name: &str,
        digest: &str,
        signer: &str,
        signature: &str,
    ) -> Option<String> {
        let raw = *parse_digest(digest).ok()?.as_bytes();
        let key = PublicKey::parse(signer).ok()?;
        if !self.keys.contains(&key) {
            return None;
        }
        let signature = parse_hex64(signature)?;
        key.verify_ref(name, &raw, &signature)
            .then(|| key.to_string())
    }

    fn __repr__(&self) -> String {
        format!("TrustedKeys({} keys)", self.keys.keys().len())
    }
}
