//! Manifests: small JSON objects that list child digests plus metadata, so
//! the store knows which objects one entry holds and GC can follow them.
//!
//! Encoding: `b"precompile-manifest\n"` then
//! `{"version":1,"children":[<hex>...],"meta":{...}}`. serde_json keeps object
//! keys sorted, so equal manifests encode to equal bytes and dedup.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::hash::Digest;

/// First bytes of every manifest blob.
pub const MANIFEST_MAGIC: &[u8] = b"precompile-manifest\n";
/// The manifest encoding version this build writes and reads.
pub const MANIFEST_VERSION: u32 = 1;
/// Largest manifest, in bytes (about 200,000 children). GC hashes every
/// reached object up to this size before trusting it is not a damaged
/// manifest, so the bound keeps large blobs out of that work.
pub const MAX_MANIFEST_LEN: usize = 16 << 20;

/// A decoded manifest.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    /// The objects this entry holds, in the order given.
    pub children: Vec<Digest>,
    /// Arbitrary JSON metadata.
    pub meta: Map<String, Value>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    version: u32,
    children: Vec<String>,
    meta: Map<String, Value>,
}

impl Manifest {
    /// The blob bytes for this manifest.
    pub fn encode(&self) -> Vec<u8> {
        let doc = Doc {
            version: MANIFEST_VERSION,
            children: self.children.iter().map(Digest::to_hex).collect(),
            meta: self.meta.clone(),
        };
        let mut out = MANIFEST_MAGIC.to_vec();
        serde_json::to_writer(&mut out, &doc).expect("JSON values always serialize");
        out
    }

    /// Decodes blob bytes. `None` when they do not start with the magic;
    /// `Some(Err(_))` when they do but are not a valid manifest.
    pub fn decode(bytes: &[u8]) -> Option<Result<Manifest, String>> {
        let json = bytes.strip_prefix(MANIFEST_MAGIC)?;
        Some(Self::decode_json(json))
    }

    fn decode_json(json: &[u8]) -> Result<Manifest, String> {
        let doc: Doc = serde_json::from_slice(json).map_err(|e| e.to_string())?;
        check_integers(json)?;
        if doc.version != MANIFEST_VERSION {
            return Err(format!("manifest version {} is not supported", doc.version));
        }
        let children = doc
            .children
            .iter()
            .map(|hex| Digest::from_hex(hex).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Manifest {
            children,
            meta: doc.meta,
        })
    }
}

/// The version of a manifest this build cannot read: bytes with the magic
/// and a JSON object whose integer `version` is not [`MANIFEST_VERSION`].
/// `None` for anything else (a readable manifest, or user data that merely
/// starts with the magic).
pub fn unknown_version(bytes: &[u8]) -> Option<u64> {
    #[derive(Deserialize)]
    struct Versioned {
        version: u64,
    }
    let json = bytes.strip_prefix(MANIFEST_MAGIC)?;
    let doc: Versioned = serde_json::from_slice(json).ok()?;
    (doc.version != u64::from(MANIFEST_VERSION)).then_some(doc.version)
}

/// Refuses integer literals outside -2**63 .. 2**64-1: serde_json would read
/// them as floats, silently losing digits. Scans the (already parsed, so
/// well-formed) JSON for number tokens outside strings.
fn check_integers(json: &[u8]) -> Result<(), String> {
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'"' => {
                i += 1;
                while i < json.len() && json[i] != b'"' {
                    i += if json[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < json.len()
                    && matches!(json[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                let token = std::str::from_utf8(&json[start..i]).unwrap_or("");
                let integral = !token.contains(['.', 'e', 'E']);
                if integral && token.parse::<i64>().is_err() && token.parse::<u64>().is_err() {
                    return Err(format!(
                        "integer {token} is outside -2**63 .. 2**64-1 and cannot be read exactly"
                    ));
                }
            }
            _ => i += 1,
        }
    }
    Ok(())
}

/// True when `bytes` start like a manifest.
pub fn looks_like_manifest(bytes: &[u8]) -> bool {
    bytes.starts_with(MANIFEST_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::hash_bytes;
    use proptest::prelude::*;

    #[test]
    fn encoding_is_canonical() {
        let mut meta = Map::new();
        meta.insert("b".into(), Value::from(1));
        meta.insert("a".into(), Value::from("x"));
        let m = Manifest {
            children: vec![hash_bytes(b"c")],
            meta,
        };
        let text = String::from_utf8(m.encode()).unwrap();
        let hex = hash_bytes(b"c").to_hex();
        assert_eq!(
            text,
            format!("precompile-manifest\n{{\"version\":1,\"children\":[\"{hex}\"],\"meta\":{{\"a\":\"x\",\"b\":1}}}}")
        );
    }

    #[test]
    fn decode_rejects() {
        assert!(Manifest::decode(b"plain data").is_none());
        assert!(Manifest::decode(b"precompile-manifest\n{")
            .unwrap()
            .is_err());
        let v2 = b"precompile-manifest\n{\"version\":2,\"children\":[],\"meta\":{}}";
        assert!(Manifest::decode(v2).unwrap().is_err());
        let bad_child = b"precompile-manifest\n{\"version\":1,\"children\":[\"zz\"],\"meta\":{}}";
        assert!(Manifest::decode(bad_child).unwrap().is_err());
        let huge = b"precompile-manifest\n{\"version\":1,\"children\":[],\"meta\":{\"n\":18446744073709551616}}";
        assert!(Manifest::decode(huge).unwrap().is_err());
        let fine = b"precompile-manifest\n{\"version\":1,\"children\":[],\"meta\":{\"n\":18446744073709551615,\"m\":-9223372036854775808,\"f\":1e300,\"s\":\"99999999999999999999\\\"9\"}}";
        assert!(Manifest::decode(fine).unwrap().is_ok());
    }

    /// 20,000 mutants of a manifest: every one decodes to an error or to a
    /// manifest that re-encodes and decodes to itself; none panics.
    #[test]
    fn mutants_never_panic() {
        let mut meta = Map::new();
        meta.insert("n".into(), Value::from(u64::MAX));
        meta.insert("s".into(), Value::from("text \u{e9}"));
        meta.insert(
            "l".into(),
            serde_json::json!([1, -2, 2.5, null, {"k": [true]}]),
        );
        let m = Manifest {
            children: (0..4).map(|i: u8| hash_bytes(&[i])).collect(),
            meta,
        };
        let original = m.encode();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let start = std::time::Instant::now();
        let mut decoded = 0;
        for _ in 0..20_000 {
            let mut bytes = original.clone();
            match next() % 5 {
                0 => {
                    let at = next() as usize % bytes.len();
                    bytes[at] ^= 1 << (next() % 8);
                }
                1 => bytes.truncate(next() as usize % bytes.len()),
                2 => {
                    let at = next() as usize % bytes.len();
                    let tokens = b"{}[]\",:0123456789e-+.\\u\"tfn";
                    bytes[at] = tokens[next() as usize % tokens.len()];
                }
                3 => {
                    let at = next() as usize % bytes.len();
                    let end = (at + (next() as usize % 40)).min(bytes.len());
                    bytes.drain(at..end);
                }
                _ => {
                    let at = next() as usize % bytes.len();
                    let insert = b"99999999999999999999999";
                    bytes.splice(
                        at..at,
                        insert[..(next() as usize % insert.len())].iter().copied(),
                    );
                }
            }
            let _ = unknown_version(&bytes);
            if let Some(Ok(m)) = Manifest::decode(&bytes) {
                decoded += 1;
                assert_eq!(Manifest::decode(&m.encode()).unwrap().unwrap(), m);
            }
        }
        assert!(decoded < 20_000);
        assert!(start.elapsed() < std::time::Duration::from_secs(60));
    }

    fn json_leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[^\u{0}]{0,12}".prop_map(Value::from),
        ]
    }

    proptest! {
        #[test]
        fn roundtrip(
            children in proptest::collection::vec(proptest::array::uniform32(any::<u8>()), 0..8),
            meta in proptest::collection::btree_map("[a-z]{1,6}", json_leaf(), 0..6),
        ) {
            let m = Manifest {
                children: children.into_iter().map(|b| blake3::Hash::from_bytes(b).into()).collect(),
                meta: meta.into_iter().collect(),
            };
            let bytes = m.encode();
            prop_assert!(looks_like_manifest(&bytes));
            prop_assert_eq!(Manifest::decode(&bytes).unwrap().unwrap(), m.clone());
            prop_assert_eq!(Manifest::decode(&bytes).unwrap().unwrap().encode(), bytes);
        }
    }
}
