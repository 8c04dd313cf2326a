//! Storing and loading manifests; their encoding lives in [`crate::base::manifest`].

use serde_json::{Map, Value};

use crate::base::manifest::{Manifest, MAX_MANIFEST_LEN};
use crate::base::{Existing, Expect};
use crate::error::{Error, Result};
use crate::hash::Digest;
use crate::lock::LockMode;
use crate::store::{PutOutcome, Store};

impl Store {
    /// Stores a manifest listing `children`, which must all be stored, with
    /// everything they reach in turn ([`Error::Missing`] otherwise), so
    /// "reachable from a ref" is always well defined.
    pub fn put_manifest(
        &self,
        children: &[Digest],
        meta: Map<String, Value>,
    ) -> Result<PutOutcome> {
        let manifest = Manifest {
            children: children.to_vec(),
            meta,
        };
        let bytes = manifest.encode();
        if bytes.len() > MAX_MANIFEST_LEN {
            return Err(Error::Format(format!(
                "manifest of {} bytes is larger than the limit of {MAX_MANIFEST_LEN}",
                bytes.len()
            )));
        }
        let digest = crate::hash::hash_bytes(&bytes);
        let _lock = self.lock(LockMode::Shared)?;
        let mut nested = Vec::new();
        for child in children {
            // Children are refreshed like dedup hits: until a ref names the
            // manifest, only the grace period protects them.
            match self.existing(child, Expect::Unknown)? {
                Existing::Good(file) => {
                    self.keep_fresh(child, &file)?;
                    if Store::starts_like_manifest(&file) {
                        nested.push(*child);
                    }
                }
                Existing::Absent => return Err(Error::Missing { digest: *child }),
                Existing::Damaged { .. } => return Err(Error::Corrupt { digest: *child }),
            }
        }
        // A child manifest left behind by a GC killed part-way may have lost
        // its own children.
        for child in nested {
            self.check_closure(&child)?;
        }
        let new = self.put_locked(
            &digest,
            Expect::Bytes(&bytes),
            |f| std::io::Write::write_all(f, &bytes),
            None,
        )?;
        Ok(PutOutcome { digest, new })
    }

    /// Reads and decodes the manifest named `digest` (verified like `get`).
    /// An object that is not a manifest is [`Error::Format`].
    pub fn get_manifest(&self, digest: &Digest) -> Result<Manifest> {
        let blob = self.get(digest)?;
        match Manifest::decode(&blob) {
            Some(Ok(manifest)) => Ok(manifest),
            Some(Err(why)) => Err(Error::Format(format!(
                "object {digest} is not a valid manifest: {why}"
            ))),
            None => Err(Error::Format(format!("object {digest} is not a manifest"))),
        }
    }
}
