//! Refs: named pointers to objects, one small file each under `refs/`.
//!
//! A ref file holds the 64-hex digest and a newline. Names may contain '/'
//! to form namespaces (`dynamo/abc`), which become directories.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::error::{Error, IoContext, Result};
use crate::hash::Digest;
use crate::lock::LockMode;
use crate::store::durable::{fsync_dir, touch, TmpFile};
use crate::store::Store;

/// Longest ref name, in bytes (a common filename limit).
pub const MAX_NAME_LEN: usize = 255;

/// Checks a ref name: non-empty, at most [`MAX_NAME_LEN`] bytes, relative,
/// '/'-separated components that are non-empty and do not start with '.'
/// (which rules out `.` and `..`), and no NUL or backslash.
pub fn validate_name(name: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::InvalidName(format!("{name:?}: {why}")));
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad("longer than 255 bytes");
    }
    if name.contains('\0') {
        return bad("contains NUL");
    }
    if name.contains('\\') {
        return bad("contains a backslash");
    }
    if name.starts_with('/') {
        return bad("absolute");
    }
    for component in name.split('/') {
        if component.is_empty() {
            return bad("empty path component");
        }
        if component == ".." {
            return bad("contains '..'");
        }
        if component.starts_with('.') {
            return bad("a component starts with '.'");
        }
    }
    Ok(())
}

/// The content of a ref file.
pub fn encode_ref(digest: &Digest) -> String {
    format!("{digest}\n")
}

/// Parses the content of a ref file.
pub fn decode_ref(text: &str) -> Option<Digest> {
    Digest::from_hex(text.strip_suffix('\n')?).ok()
}

impl Store {
    fn ref_path(&self, name: &str) -> Result<PathBuf> {
        validate_name(name)?;
        Ok(self.layout.refs_dir().join(name))
    }

    /// Points `name` at `digest`, replacing any previous target atomically.
    /// The object must exist ([`Error::Missing`] otherwise).
    pub fn set_ref(&self, name: &str, digest: &Digest) -> Result<()> {
        // Held across the existence check and the rename, so GC cannot sweep
        // the target in between and leave a dangling ref.
        let _lock = self.lock(LockMode::Shared)?;
        self.set_ref_locked(name, digest)
    }

    /// [`set_ref`](Self::set_ref) for a caller that already holds the GC
    /// lock (taking it again could wait forever on a GC queued in between).
    pub(crate) fn set_ref_locked(&self, name: &str, digest: &Digest) -> Result<()> {
        let path = self.ref_path(name)?;
        if !self.contains(digest)? {
            return Err(Error::Missing { digest: *digest });
        }
        let parent = path.parent().expect("refs live under refs/");
        if !parent.is_dir() {
            create_namespace(&self.layout.refs_dir(), parent, name)?;
        }
        let tmp = TmpFile::write(&self.layout.tmp_dir(), encode_ref(digest).as_bytes())?;
        match tmp.rename_to(&path) {
            // rename(2) refuses to replace a directory: `name` is a namespace.
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::IsADirectory => {
                return Err(Error::InvalidName(format!(
                    "{name:?} is a namespace of other refs"
                )));
            }
            other => other?,
        }
        fsync_dir(parent)
    }

    /// The digest `name` points at, or `None`.
    pub fn get_ref(&self, name: &str) -> Result<Option<Digest>> {
        let path = self.ref_path(name)?;
        match fs::read_to_string(&path) {
            Ok(text) => decode_ref(&text)
                .map(Some)
                .ok_or_else(|| Error::Format(format!("ref file {} is malformed", path.display()))),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::IsADirectory
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(Error::io(path, e)),
        }
    }

    /// Removes `name`; false when it did not exist.
    pub fn delete_ref(&self, name: &str) -> Result<bool> {
        let path = self.ref_path(name)?;
        match fs::remove_file(&path) {
            Ok(()) => {
                fsync_dir(path.parent().expect("refs live under refs/"))?;
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::IsADirectory
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(Error::io(path, e)),
        }
    }

    /// Sets the ref file's mtime to now (for LRU eviction); false when the
    /// ref does not exist.
    pub fn touch_ref(&self, name: &str) -> Result<bool> {
        let path = self.ref_path(name)?;
        if path.is_dir() {
            return Ok(false);
        }
        touch(&path)
    }

    /// The ref file's mtime, or `None` when the ref does not exist.
    pub fn ref_mtime(&self, name: &str) -> Result<Option<SystemTime>> {
        let path = self.ref_path(name)?;
        match fs::metadata(&path) {
            Ok(meta) if meta.is_file() => Ok(Some(meta.modified().at(&path)?)),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(path, e)),
        }
    }

    /// All ref names starting with `prefix`, sorted.
    pub fn refs(&self, prefix: &str) -> Result<Vec<String>> {
        let mut names = Vec::new();
        walk_refs(&self.layout.refs_dir(), "", &mut |name, _| {
            if name.starts_with(prefix) {
                names.push(name.to_owned());
            }
        })?;
        names.sort();
        Ok(names)
    }
}

/// Creates the namespace directories of a ref, fsyncing each new one into
/// its parent.
fn create_namespace(refs_dir: &Path, dir: &Path, name: &str) -> Result<()> {
    let conflict = || Error::InvalidName(format!("{name:?}: a prefix of it is itself a ref"));
    let rel = dir.strip_prefix(refs_dir).expect("namespace under refs/");
    let mut current = refs_dir.to_path_buf();
    for component in rel.components() {
        let parent = current.clone();
        current.push(component);
        match fs::create_dir(&current) {
            Ok(()) => fsync_dir(&parent)?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if !current.is_dir() {
                    return Err(conflict());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => return Err(conflict()),
            Err(e) => return Err(Error::io(&current, e)),
        }
    }
    Ok(())
}

/// Calls `visit(name, path)` for every ref file under `dir`.
pub(crate) fn walk_refs(
    dir: &Path,
    prefix: &str,
    visit: &mut dyn FnMut(&str, &Path),
) -> Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.at(dir)?;
        let Ok(file_name) = entry.file_name().into_string() else {
            continue;
        };
        if file_name.starts_with('.') {
            continue;
        }
        let name = format!("{prefix}{file_name}");
        let path = entry.path();
        if entry.file_type().at(&path)?.is_dir() {
            walk_refs(&path, &format!("{name}/"), visit)?;
        } else {
            visit(&name, &path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Options;
    use proptest::prelude::*;

    #[test]
    fn invalid_names() {
        for bad in [
            "", "/abs", "a/../b", "..", ".", "a//b", "a/", ".hidden", "a/.b", "a\\b", "a\0b",
        ] {
            assert!(
                matches!(validate_name(bad), Err(Error::InvalidName(_))),
                "{bad:?}"
            );
        }
        assert!(validate_name(&"x".repeat(256)).is_err());
        for good in [
            "a",
            "dynamo/abc",
            "a.b",
            "x".repeat(255).as_str(),
            "ns/sub/name-1_2",
        ] {
            assert!(validate_name(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn refs_roundtrip_with_namespaces() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path().join("s"), Options::default()).unwrap();
        let a = s.put(b"a").unwrap().digest;
        let b = s.put(b"b").unwrap().digest;
        s.set_ref("dynamo/x", &a).unwrap();
        s.set_ref("dynamo/x", &b).unwrap();
        s.set_ref("top", &a).unwrap();
        assert_eq!(s.get_ref("dynamo/x").unwrap(), Some(b));
        assert_eq!(s.get_ref("dynamo").unwrap(), None);
        assert_eq!(s.refs("").unwrap(), ["dynamo/x", "top"]);
        assert_eq!(s.refs("dyn").unwrap(), ["dynamo/x"]);
        assert!(matches!(
            s.set_ref("top/sub", &a),
            Err(Error::InvalidName(_))
        ));
        assert!(matches!(
            s.set_ref("dynamo", &a),
            Err(Error::InvalidName(_))
        ));
        let missing = crate::hash::hash_bytes(b"never stored");
        assert!(matches!(
            s.set_ref("m", &missing),
            Err(Error::Missing { .. })
        ));
        assert!(s.ref_mtime("top").unwrap().is_some());
        assert!(s.touch_ref("top").unwrap());
        assert!(s.delete_ref("top").unwrap());
        assert!(!s.delete_ref("top").unwrap());
        assert!(!s.touch_ref("top").unwrap());
        assert_eq!(s.ref_mtime("top").unwrap(), None);
    }

    proptest! {
        #[test]
        fn ref_file_roundtrip(bytes in proptest::array::uniform32(any::<u8>())) {
            let d = Digest::from(blake3::Hash::from_bytes(bytes));
            let text = encode_ref(&d);
            prop_assert_eq!(text.len(), 65);
            prop_assert_eq!(decode_ref(&text), Some(d));
            prop_assert_eq!(decode_ref(text.trim_end()), None);
        }

        #[test]
        fn valid_names_stay_inside_refs(name in "[a-z0-9._/-]{1,40}") {
            if validate_name(&name).is_ok() {
                let p = Path::new("/refs").join(&name);
                prop_assert!(p.starts_with("/refs"));
                prop_assert!(p.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::RootDir)));
                prop_assert!(!name.split('/').any(|c| c.is_empty() || c.starts_with('.')));
            } else {
                prop_assert!(name.split('/').any(|c| c.is_empty() || c.starts_with('.')));
            }
        }
    }
}
