//! Reading manifests out of a bundle, and walking from an entry to every blob it needs.

use std::collections::HashSet;

use super::reader::Bundle;
use super::{corrupt_error, format_error, hex, missing_error};
use crate::base::manifest::{looks_like_manifest, Manifest};
use crate::error::Error;
use crate::hash::hash_bytes;

impl Bundle {
    /// Decodes the manifest named `digest`, after checking its bytes against the digest
    /// (manifests are small, and their children are trusted from here on): `Error::Missing`
    /// if the bundle lacks it, `Error::Corrupt` if it does not hash to its name,
    /// `Error::Format` if it is not a manifest.
    pub fn manifest(&self, digest: &[u8; 32]) -> Result<Manifest, Error> {
        let bytes = self.blob(digest)?;
        if hash_bytes(bytes).as_bytes() != digest {
            return Err(corrupt_error(digest));
        }
        match Manifest::decode(bytes) {
            Some(Ok(manifest)) => Ok(manifest),
            Some(Err(why)) => Err(format_error(format!(
                "object {} is not a valid manifest: {why}",
                hex(digest)
            ))),
            None => Err(format_error(format!(
                "object {} is not a manifest",
                hex(digest)
            ))),
        }
    }

    /// Every blob `root` reaches, itself included, through manifests: depth-first with
    /// children in manifest order, each blob once. For an entry exported from a store, that
    /// is also file order, so the result prefetches as a few long ranges.
    ///
    /// Manifests are checked against their digests on the way (`Error::Corrupt`); leaves are
    /// not read at all. A blob the bundle lacks is `Error::Missing`. Like the store's GC, a
    /// blob that starts with the manifest magic but does not parse is a leaf.
    pub fn closure(&self, root: &[u8; 32]) -> Result<Vec<[u8; 32]>, Error> {
        let mut seen = HashSet::new();
        let mut order = Vec::new();
        let mut stack = vec![*root];
        while let Some(digest) = stack.pop() {
            if !seen.insert(digest) {
                continue;
            }
            order.push(digest);
            let bytes = self.get(&digest).ok_or_else(|| missing_error(&digest))?;
            if !looks_like_manifest(bytes) {
                continue;
            }
            if hash_bytes(bytes).as_bytes() != &digest {
                return Err(corrupt_error(&digest));
            }
            if let Some(Ok(manifest)) = Manifest::decode(bytes) {
                // Reversed so that the first child is popped, and listed, first.
                stack.extend(manifest.children.iter().rev().map(|c| *c.as_bytes()));
            }
        }
        Ok(order)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Map;

    use super::*;
    use crate::bundle::BundleWriter;
    use crate::hash::Digest;

    fn manifest(children: &[Digest]) -> Vec<u8> {
        Manifest {
            children: children.to_vec(),
            meta: Map::new(),
        }
        .encode()
    }

    #[test]
    fn closure_walks_depth_first_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b");
        let leaf = |s: &[u8]| (hash_bytes(s), s.to_vec());
        let (x, y) = (leaf(b"x"), leaf(b"y"));
        let inner = manifest(&[y.0, x.0]);
        let inner = (hash_bytes(&inner), inner);
        let top = manifest(&[x.0, inner.0]);
        let top = (hash_bytes(&top), top);
        let mut w = BundleWriter::create(&path).unwrap();
        for (d, bytes) in [&x, &y, &inner, &top] {
            w.add_blob(*d.as_bytes(), bytes).unwrap();
        }
        w.finish().unwrap();
        let b = Bundle::open(&path).unwrap();
        let got = b.closure(top.0.as_bytes()).unwrap();
        let want: Vec<[u8; 32]> = [top.0, x.0, inner.0, y.0]
            .iter()
            .map(|d| *d.as_bytes())
            .collect();
        assert_eq!(got, want);
        assert_eq!(
            b.manifest(inner.0.as_bytes()).unwrap().children,
            vec![y.0, x.0]
        );
        assert!(matches!(b.manifest(x.0.as_bytes()), Err(Error::Format(_))));
        let absent = hash_bytes(b"absent");
        assert!(matches!(
            b.closure(absent.as_bytes()),
            Err(Error::Missing { .. })
        ));
    }
}
