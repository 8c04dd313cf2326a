//! blake3 digests: the names of stored objects.
//!
//! Small inputs hash on the calling thread; large ones are split across all
//! cores with the blake3 crate's rayon support, on the crate's fork-safe
//! thread pool (`pool.rs`).

use std::fmt;
use std::fs::File;
use std::path::Path;
use std::str::FromStr;

use crate::error::{Error, IoContext, Result};

/// Inputs at least this large are hashed with `update_rayon` on all cores.
///
/// Measured on the 2-core AMD EPYC (AVX-512) development machine, blake3
/// 1.8.7: one thread hashes at ~6.3 GB/s at every size; `update_rayon` is
/// slower below ~200 KiB (0.4x at 64 KiB, 0.75x at 128 KiB: thread hand-off
/// costs more than it saves), breaks even at 256 KiB (1.04-1.16x), and wins
/// from 512 KiB (1.07-1.32x), 1 MiB (1.3x) and 4 MiB (1.6-1.8x). 512 KiB is
/// the smallest size where going parallel was never slower. Machines with more
/// cores break even earlier, so this errs on the safe side.
pub const PARALLEL_THRESHOLD: usize = 512 * 1024;

/// A 256-bit blake3 digest; its lower-case hex form names an object.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest([u8; 32]);

impl Digest {
    /// Length of the hex form.
    pub const HEX_LEN: usize = 64;

    /// Parses 64 lower-case hex characters. Upper case is refused so that one
    /// digest has exactly one spelling, and so one object path.
    pub fn from_hex(s: &str) -> Result<Self> {
        let b = s.as_bytes();
        if b.len() != Self::HEX_LEN || !b.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(Error::InvalidDigest(s.chars().take(80).collect()));
        }
        let mut out = [0u8; 32];
        for (i, pair) in b.chunks_exact(2).enumerate() {
            out[i] = (nibble(pair[0]) << 4) | nibble(pair[1]);
        }
        Ok(Digest(out))
    }

    /// The lower-case hex form.
    pub fn to_hex(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(Self::HEX_LEN);
        for byte in self.0 {
            s.push(HEX[(byte >> 4) as usize] as char);
            s.push(HEX[(byte & 15) as usize] as char);
        }
        s
    }

    /// The raw 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        _ => c - b'a' + 10,
    }
}

impl From<blake3::Hash> for Digest {
    fn from(h: blake3::Hash) -> Self {
        Digest(*h.as_bytes())
    }
}

impl FromStr for Digest {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Digest::from_hex(s)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

/// Hashes a byte slice, on all cores when it is at least [`PARALLEL_THRESHOLD`].
pub fn hash_bytes(data: &[u8]) -> Digest {
    if data.len() >= PARALLEL_THRESHOLD {
        // On the crate's pool, not rayon's global one: see `pool.rs` (fork).
        crate::pool::install(|| blake3::Hasher::new().update_rayon(data).finalize().into())
    } else {
        blake3::hash(data).into()
    }
}

/// Hashes a file without reading it into memory: blake3 maps it and hashes
/// the mapping on all cores (it falls back to a read loop for small files).
pub fn hash_file(path: &Path) -> Result<Digest> {
    crate::pool::install(|| {
        let mut h = blake3::Hasher::new();
        h.update_mmap_rayon(path).at(path)?;
        Ok(h.finalize().into())
    })
}

/// Hashes an open file by mapping it; used on files we just wrote ourselves.
pub(crate) fn hash_open_file(file: &File, path: &Path) -> Result<Digest> {
    let len = file.metadata().at(path)?.len();
    if len == 0 {
        return Ok(hash_bytes(&[]));
    }
    // SAFETY: the caller owns the file (a private tmp file nobody else knows
    // about), so it is not truncated or rewritten while mapped.
    let map = unsafe { memmap2::Mmap::map(file) }.at(path)?;
    Ok(hash_bytes(&map))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_vector() {
        // blake3 of the empty input, from the reference test vectors.
        assert_eq!(
            hash_bytes(b"").to_hex(),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
    }

    #[test]
    fn parallel_and_serial_agree() {
        let data: Vec<u8> = (0..PARALLEL_THRESHOLD * 3 + 17)
            .map(|i| (i * 7) as u8)
            .collect();
        assert_eq!(hash_bytes(&data), Digest::from(blake3::hash(&data)));
    }

    #[test]
    fn rejects_bad_hex() {
        let good = hash_bytes(b"x").to_hex();
        assert!(Digest::from_hex(&good).is_ok());
        assert!(Digest::from_hex(&good.to_uppercase()).is_err());
        assert!(Digest::from_hex(&good[1..]).is_err());
        assert!(Digest::from_hex(&format!("{}g", &good[1..])).is_err());
        assert!(Digest::from_hex("").is_err());
    }

    proptest! {
        #[test]
        fn hex_roundtrip(bytes in proptest::array::uniform32(any::<u8>())) {
            let d = Digest(bytes);
            prop_assert_eq!(Digest::from_hex(&d.to_hex()).unwrap(), d);
            prop_assert_eq!(d.to_hex(), blake3::Hash::from_bytes(bytes).to_hex().to_string());
        }
    }
}
