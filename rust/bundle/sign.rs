//! Signed bundles: ed25519 keys, their text form, and the signature section.
//!
//! A digest proves that bytes are the bytes a name promises; it says nothing about who
//! made them. A signature binds a bundle's header, index and refs table, which name every
//! blob by its blake3 digest, to the holder of one secret key, so a serving host that
//! trusts that key's public half can refuse anything else before reading a byte of it.
//!
//! The cryptography is ed25519 from `ed25519-dalek`; this module only frames it:
//!
//! ```text
//! public key text   "ed25519:" + 64 lower-case hex digits (the 32-byte public key)
//! secret key file   "ed25519-secret:" + 64 lower-case hex digits (the 32-byte seed) + "\n",
//!                   mode 0600
//! signed message    SIGNED_CONTEXT || blake3(header || index || refs table)
//! ref message     REF_CONTEXT || u32 LE len(name) || name (UTF-8) || digest (32 bytes)
//! signature section (SIGNATURE_LEN bytes, between the refs table and the trailer)
//!   0   [u8; 8]   b"PCBSIG\0\0"
//!   8   u32       scheme   1 = ed25519
//!   12  u32       reserved 0
//!   16  [u8; 32]  public key
//!   48  [u8; 64]  signature over the signed message
//! ```

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};

// The section layout is part of the byte format; re-exported here, where it is used.
use super::format::read_u32;
pub use super::format::{SCHEME_ED25519, SIGNATURE_LEN, SIGNATURE_MAGIC};
use crate::error::Error;

/// Prefix of a public key's text form.
pub const PUBLIC_PREFIX: &str = "ed25519:";
/// Prefix of a secret key file's content.
pub const SECRET_PREFIX: &str = "ed25519-secret:";
/// Domain separation: a signature over a bundle can never be replayed as a signature
/// over anything else signed with the same key.
pub const SIGNED_CONTEXT: &[u8] = b"precompile bundle signature v1\0";
/// Domain separation for a signed ref (a remote ref value): a ref signature is never a
/// bundle signature, nor the other way round.
pub const REF_CONTEXT: &[u8] = b"precompile ref signature v1\0";
/// The environment variable that lists trusted keys when a caller names none.
pub const TRUSTED_KEYS_ENV: &str = "PRECOMPILE_TRUSTED_KEYS";

/// An ed25519 public key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// Parses the text form `ed25519:<64 hex>` (surrounding whitespace ignored).
    pub fn parse(text: &str) -> Result<PublicKey, Error> {
        let text = text.trim();
        let hex = text.strip_prefix(PUBLIC_PREFIX).ok_or_else(|| {
            Error::InvalidKey(format!(
                "{text:?} is not a public key (expected {PUBLIC_PREFIX}<64 hex digits>)"
            ))
        })?;
        let bytes = parse_hex32(hex)
            .ok_or_else(|| Error::InvalidKey(format!("{text:?}: expected 64 hex digits")))?;
        let key = VerifyingKey::from_bytes(&bytes)
            .map_err(|_| Error::InvalidKey(format!("{text:?} is not a valid ed25519 key")))?;
        if key.is_weak() {
            return Err(Error::InvalidKey(format!("{text:?} is a weak ed25519 key")));
        }
        Ok(PublicKey(key))
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        self.0.as_bytes()
    }

    /// Whether `signature` is this key's signature of ref `name` pointing at `digest`.
    /// Strict verification: a weak key or a non-canonical signature never verifies.
    pub fn verify_ref(&self, name: &str, digest: &[u8; 32], signature: &[u8; 64]) -> bool {
        let signature = Signature::from_bytes(signature);
        self.0
            .verify_strict(&ref_message(name, digest), &signature)
            .is_ok()
    }
}

impl std::fmt::Display for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{PUBLIC_PREFIX}{}", to_hex(self.0.as_bytes()))
    }
}

/// A secret signing key, read from a key file.
pub struct SecretKey(SigningKey);

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret itself.
        write!(f, "SecretKey({})", self.public())
    }
}

impl SecretKey {
    /// Makes a new key from the operating system's random source and writes it to `path`
    /// with mode 0600. An existing file (or a symlink) at `path` is never overwritten.
    pub fn generate(path: &Path) -> Result<SecretKey, Error> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed)
            .map_err(|e| Error::io(path, io::Error::other(format!("no randomness: {e}"))))?;
        let key = SecretKey(SigningKey::from_bytes(&seed));
        seed.fill(0);
        let text = format!("{SECRET_PREFIX}{}\n", to_hex(key.0.as_bytes()));
        // Written in full to a temporary file beside `path`, then linked into place:
        // a failed write leaves no partial key file behind, and link(2), unlike
        // rename(2), never replaces an existing file.
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .ok_or_else(|| Error::InvalidKey(format!("{} is not a file name", path.display())))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".tmp{}-{:08x}", std::process::id(), rand_u32()));
        let tmp = dir.join(tmp_name);
        let written = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)
                .map_err(|e| Error::io(&tmp, e))?;
            file.write_all(text.as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| Error::io(&tmp, e))?;
            fs::hard_link(&tmp, path).map_err(|e| Error::io(path, e))
        })();
        let _ = fs::remove_file(&tmp);
        written?;
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(key)
    }

    /// Reads a key file written by [`generate`](Self::generate). Like ssh, it refuses a
    /// file that other users may read: a secret others can read is not a secret.
    pub fn load(path: &Path) -> Result<SecretKey, Error> {
        let meta = fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if !meta.is_file() {
            return Err(Error::InvalidKey(format!(
                "{} is not a regular file",
                path.display()
            )));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(Error::InvalidKey(format!(
                "{} is accessible by other users (mode {:o}); chmod 600 it",
                path.display(),
                meta.mode() & 0o777
            )));
        }
        let text = fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let seed = text
            .trim()
            .strip_prefix(SECRET_PREFIX)
            .and_then(parse_hex32)
            .ok_or_else(|| {
                Error::InvalidKey(format!("{} is not a secret key file", path.display()))
            })?;
        Ok(SecretKey(SigningKey::from_bytes(&seed)))
    }

    /// The public half, to hand to whoever should trust this key.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// The signature of ref `name` pointing at `digest` (see [`ref_message`]).
    pub fn sign_ref(&self, name: &str, digest: &[u8; 32]) -> [u8; 64] {
        self.0.sign(&ref_message(name, digest)).to_bytes()
    }

    /// The signature section for a bundle whose metadata hashes to `digest`.
    pub(crate) fn sign_section(&self, digest: &[u8; 32]) -> [u8; SIGNATURE_LEN] {
        let signature = self.0.sign(&signed_message(digest));
        let mut out = [0u8; SIGNATURE_LEN];
        out[0..8].copy_from_slice(&SIGNATURE_MAGIC);
        out[8..12].copy_from_slice(&SCHEME_ED25519.to_le_bytes());
        out[16..48].copy_from_slice(self.public().as_bytes());
        out[48..].copy_from_slice(&signature.to_bytes());
        out
    }
}

/// The set of keys a reader trusts. A bundle is accepted only when it carries a valid
/// signature by one of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedKeys(Vec<PublicKey>);

impl TrustedKeys {
    /// Keys from `specs`: each is a public key in text form, or the path of a file holding
    /// one or more (one a line; blank lines and `#` comments ignored). An empty set trusts
    /// nothing, so every bundle is refused.
    pub fn from_specs<S: AsRef<str>>(specs: &[S]) -> Result<TrustedKeys, Error> {
        let mut keys = Vec::new();
        for spec in specs {
            let spec = spec.as_ref().trim();
            if spec.starts_with(PUBLIC_PREFIX) {
                keys.push(PublicKey::parse(spec)?);
                continue;
            }
            let path = Path::new(spec);
            check_key_file(path)?;
            let text = fs::read_to_string(path).map_err(|e| {
                Error::InvalidKey(format!(
                    "{spec:?} is neither a public key ({PUBLIC_PREFIX}...) nor a readable key file: {e}"
                ))
            })?;
            let before = keys.len();
            for line in text.lines().map(str::trim) {
                if !line.is_empty() && !line.starts_with('#') {
                    keys.push(PublicKey::parse(line)?);
                }
            }
            if keys.len() == before {
                return Err(Error::InvalidKey(format!("{spec:?} holds no public key")));
            }
        }
        Ok(TrustedKeys(keys))
    }

    /// Keys from `$PRECOMPILE_TRUSTED_KEYS` (separated by commas or whitespace), or
    /// `None` when it is unset or empty: then no signature is required.
    pub fn from_env() -> Result<Option<TrustedKeys>, Error> {
        let Some(value) = std::env::var_os(TRUSTED_KEYS_ENV) else {
            return Ok(None);
        };
        let value = value
            .to_str()
            .ok_or_else(|| Error::InvalidKey(format!("${TRUSTED_KEYS_ENV} is not valid UTF-8")))?;
        let specs: Vec<&str> = value
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .collect();
        if specs.is_empty() {
            return Ok(None);
        }
        TrustedKeys::from_specs(&specs).map(Some)
    }

    /// Whether `key` is one of the trusted keys.
    pub fn contains(&self, key: &PublicKey) -> bool {
        self.0.contains(key)
    }

    /// The keys, in the order given.
    pub fn keys(&self) -> &[PublicKey] {
        &self.0
    }

    /// Refuses unless `signer` (the verified signer of `what`, if any) is trusted.
    pub fn check(&self, signer: Option<&PublicKey>, what: &Path) -> Result<(), Error> {
        match signer {
            None => Err(Error::Untrusted(format!(
                "{} is not signed, and a trusted signature is required",
                what.display()
            ))),
            Some(key) if !self.contains(key) => Err(Error::Untrusted(format!(
                "{} is signed by {key}, which is not a trusted key",
                what.display()
            ))),
            Some(_) => Ok(()),
        }
    }
}

/// Checks a signature section against the metadata digest it must sign, and returns the
/// signer. Any failure is `Error::Untrusted`: a section that does not verify means the
/// bundle was changed after it was signed (or never validly signed at all).
pub(crate) fn verify_section(
    section: &[u8],
    digest: &[u8; 32],
    what: &Path,
) -> Result<PublicKey, Error> {
    let refuse = |why: &str| Error::Untrusted(format!("{}: {why}", what.display()));
    if section.len() != SIGNATURE_LEN || section[0..8] != SIGNATURE_MAGIC {
        return Err(refuse("malformed signature section"));
    }
    let scheme = read_u32(section, 8);
    if scheme != SCHEME_ED25519 || read_u32(section, 12) != 0 {
        return Err(refuse(&format!("unknown signature scheme {scheme}")));
    }
    let key_bytes: [u8; 32] = section[16..48].try_into().expect("32-byte slice");
    let key = VerifyingKey::from_bytes(&key_bytes)
        .map_err(|_| refuse("the signing key is not a valid ed25519 key"))?;
    let signature = Signature::from_bytes(&section[48..].try_into().expect("64-byte slice"));
    // verify_strict also rejects weak keys and non-canonical signatures, so one bundle
    // cannot carry two different valid signatures.
    key.verify_strict(&signed_message(digest), &signature)
        .map_err(|_| {
            refuse("the signature does not match: the bundle was changed after it was signed")
        })?;
    Ok(PublicKey(key))
}

/// Like ssh with authorized_keys, a file of trusted keys that another user could write is
/// no list of trust at all: refused when another user owns it or it is group- or
/// world-writable. A missing file is left to the read that follows, which names it.
fn check_key_file(path: &Path) -> Result<(), Error> {
    let Ok(meta) = fs::metadata(path) else {
        return Ok(());
    };
    if meta.mode() & 0o022 != 0 {
        return Err(Error::Untrusted(format!(
            "trusted keys file {} is writable by other users (mode {:o}); chmod go-w it",
            path.display(),
            meta.mode() & 0o777
        )));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me && meta.uid() != 0 {
        return Err(Error::Untrusted(format!(
            "trusted keys file {} is owned by another user (uid {})",
            path.display(),
            meta.uid()
        )));
    }
    Ok(())
}

/// The message a ref signature signs: the full ref name, length-prefixed so that no
/// (name, digest) pair reads as another, and the digest it points at.
pub fn ref_message(name: &str, digest: &[u8; 32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(REF_CONTEXT.len() + 4 + name.len() + 32);
    out.extend_from_slice(REF_CONTEXT);
    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(digest);
    out
}

fn rand_u32() -> u32 {
    let mut b = [0u8; 4];
    let _ = getrandom::fill(&mut b);
    u32::from_le_bytes(b)
}

fn signed_message(digest: &[u8; 32]) -> Vec<u8> {
    [SIGNED_CONTEXT, digest.as_slice()].concat()
}

pub(crate) fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 128 hex digits as 64 bytes (a signature's text form).
pub fn parse_hex64(hex: &str) -> Option<[u8; 64]> {
    if hex.len() != 128 || !hex.is_ascii() {
        return None;
    }
    let lo = parse_hex32(&hex[..64])?;
    let hi = parse_hex32(&hex[64..])?;
    let mut out = [0u8; 64];
    out[..32].copy_from_slice(&lo);
    out[32..].copy_from_slice(&hi);
    Some(out)
}

fn parse_hex32(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        out[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(out)
}
