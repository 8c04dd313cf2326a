//! Refs: named pointers to objects, one small file each under `refs/`.
//!
//! A ref file holds the 64-hex digest and a newline. Names may contain '/'
//! to form namespaces (`dynamo/abc`), which become directories.

use std::io::{self, Read};
use std::time::SystemTime;

use rustix::fs::{FileType, OFlags};

use crate::base::beneath::Dir;
use crate::base::durable::{touch_at, TmpFile};
use crate::error::{Error, IoContext, Result};
use crate::hash::Digest;
use crate::lock::LockMode;
use crate::store::mark::{Marked, Strictness};
use crate::store::Store;

pub use crate::base::ref_name::{validate_name, MAX_NAME_LEN};

/// The content of a ref file.
pub fn encode_ref(digest: &Digest) -> String {
    format!("{digest}\n")
}

/// Parses the content of a ref file.
pub fn decode_ref(text: &str) -> Option<Digest> {
    Digest::from_hex(text.strip_suffix('\n')?).ok()
}

/// Splits a valid name into its namespace ("" for none) and last component.
fn split_name(name: &str) -> (&str, &str) {
    name.rsplit_once('/').unwrap_or(("", name))
}

/// Reads a ref file through its directory, without following a link.
/// `Ok(None)` when it is absent (or a namespace); a link, a non-UTF-8 or
/// otherwise malformed file is [`Error::Format`].
pub(crate) fn read_ref(dir: &Dir, leaf: &str) -> Result<Option<Digest>> {
    let path = dir.path().join(leaf);
    let mut file = match dir.open(leaf, OFlags::RDONLY | OFlags::NONBLOCK, 0) {
        Ok(file) => file,
        Err(e) => {
            return match e.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::ENOTDIR) => Ok(None),
                Some(libc::ELOOP) => Err(Error::Format(format!(
                    "ref file {} is a symlink; the store does not follow links",
                    path.display()
                ))),
                _ => Err(Error::io(path, e)),
            }
        }
    };
    let meta = file.metadata().at(&path)?;
    if meta.is_dir() {
        return Ok(None);
    }
    if !meta.is_file() || meta.len() > 4096 {
        return Err(Error::Format(format!(
            "ref file {} is malformed",
            path.display()
        )));
    }
    let mut bytes = Vec::with_capacity(65);
    file.read_to_end(&mut bytes).at(&path)?;
    let text = std::str::from_utf8(&bytes).ok();
    text.and_then(decode_ref)
        .map(Some)
        .ok_or_else(|| Error::Format(format!("ref file {} is malformed", path.display())))
}

impl Store {
    /// The directory holding ref `name` (after validating it), or `None`
    /// when its namespace does not exist.
    fn ref_parent<'a>(&self, name: &'a str) -> Result<Option<(Dir, &'a str)>> {
        validate_name(name)?;
        let (namespace, leaf) = split_name(name);
        match self.dirs.refs.descend(namespace, false) {
            Ok(dir) => Ok(dir.map(|d| (d, leaf))),
            // A prefix of the name is a ref file, not a namespace.
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::InvalidInput => {
                let prefix_is_ref = self.get_ref_file_prefix(namespace)?;
                if prefix_is_ref {
                    Ok(None)
                } else {
                    Err(Error::InvalidName(format!(
                        "{name:?}: a namespace of it is a symlink; the store does not follow links"
                    )))
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Whether some prefix of `namespace` is a regular ref file.
    fn get_ref_file_prefix(&self, namespace: &str) -> Result<bool> {
        let mut dir = self.dirs.refs.clone();
        for component in namespace.split('/') {
            match dir.stat(component)? {
                Some(st) if st.kind == FileType::RegularFile => return Ok(true),
                Some(st) if st.kind == FileType::Directory => {
                    dir = dir.sub(component, false)?;
                }
                _ => return Ok(false),
            }
        }
        Ok(false)
    }

    /// Points `name` at `digest`, replacing any previous target atomically.
    /// The object and everything it reaches through manifests must be
    /// stored ([`Error::Missing`] otherwise).
    pub fn set_ref(&self, name: &str, digest: &Digest) -> Result<()> {
        // Held across the existence check and the rename, so GC cannot sweep
        // the target in between and leave a dangling ref.
        let _lock = self.lock(LockMode::Shared)?;
        self.set_ref_locked(name, digest)
    }

    /// [`set_ref`](Self::set_ref) for a caller that already holds the GC
    /// lock (taking it again could wait forever on a GC queued in between).
    pub(crate) fn set_ref_locked(&self, name: &str, digest: &Digest) -> Result<()> {
        validate_name(name)?;
        self.check_closure(digest)?;
        self.write_ref_locked(name, digest)
    }

    /// Fails unless `digest` and everything it reaches is stored and sound:
    /// a ref must never name a manifest whose children are gone (a GC killed
    /// part-way leaves such manifests behind).
    pub(crate) fn check_closure(&self, digest: &Digest) -> Result<()> {
        let mut marked = Marked::default();
        self.mark([*digest], Strictness::Record, &mut marked)?;
        if let Some(&digest) = marked.corrupt.first() {
            return Err(Error::Corrupt { digest });
        }
        if let Some(&digest) = marked.missing.first() {
            return Err(Error::Missing { digest });
        }
        Ok(())
    }

    /// Writes the ref file; the caller holds the lock and checked the target.
    pub(crate) fn write_ref_locked(&self, name: &str, digest: &Digest) -> Result<()> {
        validate_name(name)?;
        let (namespace, leaf) = split_name(name);
        let conflict = || Error::InvalidName(format!("{name:?}: a prefix of it is itself a ref"));
        let parent = match self.dirs.refs.descend(namespace, true) {
            Ok(dir) => dir.expect("created"),
            Err(Error::Io { source, .. })
                if source.kind() == io::ErrorKind::InvalidInput
                    || source.raw_os_error() == Some(libc::ENOTDIR) =>
            {
                if self.get_ref_file_prefix(namespace)? {
                    return Err(conflict());
                }
                return Err(Error::InvalidName(format!(
                    "{name:?}: a namespace of it is a symlink; the store does not follow links"
                )));
            }
            Err(e) => return Err(e),
        };
        let tmp = TmpFile::write(&self.dirs.tmp, encode_ref(digest).as_bytes())?;
        match tmp.rename_to(&parent, leaf) {
            // rename(2) refuses to replace a directory: `name` is a namespace.
            Err(Error::Io { source, .. })
                if matches!(
                    source.raw_os_error(),
                    Some(libc::EISDIR) | Some(libc::ENOTEMPTY)
                ) =>
            {
                return Err(Error::InvalidName(format!(
                    "{name:?} is a namespace of other refs"
                )));
            }
            other => other?,
        }
        parent.fsync()
    }

    /// The digest `name` points at, or `None`.
    pub fn get_ref(&self, name: &str) -> Result<Option<Digest>> {
        match self.ref_parent(name)? {
            Some((dir, leaf)) => read_ref(&dir, leaf),
            None => Ok(None),
        }
    }

    /// Removes `name`; false when it did not exist.
    pub fn delete_ref(&self, name: &str) -> Result<bool> {
        let Some((dir, leaf)) = self.ref_parent(name)? else {
            return Ok(false);
        };
        match dir.unlink(leaf) {
            Ok(true) => {
                dir.fsync()?;
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(Error::Io { source, .. })
                if matches!(
                    source.raw_os_error(),
                    Some(libc::EISDIR) | Some(libc::EPERM)
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Sets the ref file's mtime to now (for LRU eviction); false when the
    /// ref does not exist. A ref file of another user (a group-shared store)
    /// cannot be touched: it is rewritten instead, unchanged but ours.
    pub fn touch_ref(&self, name: &str) -> Result<bool> {
        let Some((dir, leaf)) = self.ref_parent(name)? else {
            return Ok(false);
        };
        match dir.stat(leaf)? {
            Some(st) if st.is_file() => match touch_at(&dir, leaf) {
                Err(Error::Io { source, .. })
                    if matches!(
                        source.raw_os_error(),
                        Some(libc::EPERM) | Some(libc::EACCES)
                    ) =>
                {
                    let Some(digest) = read_ref(&dir, leaf)? else {
                        return Ok(false);
                    };
                    let tmp = TmpFile::write(&self.dirs.tmp, encode_ref(&digest).as_bytes())?;
                    tmp.rename_to(&dir, leaf)?;
                    dir.fsync()?;
                    Ok(true)
                }
                other => other,
            },
            _ => Ok(false),
        }
    }

    /// The ref file's mtime, or `None` when the ref does not exist.
    pub fn ref_mtime(&self, name: &str) -> Result<Option<SystemTime>> {
        let Some((dir, leaf)) = self.ref_parent(name)? else {
            return Ok(None);
        };
        Ok(dir.stat(leaf)?.filter(|st| st.is_file()).map(|st| st.mtime))
    }

    /// All ref names starting with `prefix`, sorted.
    pub fn refs(&self, prefix: &str) -> Result<Vec<String>> {
        let mut names = Vec::new();
        walk_refs(&self.dirs.refs, "", &mut |name, _, _| {
            if name.starts_with(prefix) {
                names.push(name.to_owned());
            }
        })?;
        names.sort();
        Ok(names)
    }
}

/// Calls `visit(name, dir, leaf)` for every ref file under `dir`, without
/// following links: a symlink there is not a ref.
pub(crate) fn walk_refs(
    dir: &Dir,
    prefix: &str,
    visit: &mut dyn FnMut(&str, &Dir, &str),
) -> Result<()> {
    for (file_name, kind) in dir.entries()? {
        if file_name.starts_with('.') {
            continue;
        }
        let kind = if kind == FileType::Unknown {
            match dir.stat(&file_name)? {
                Some(st) => st.kind,
                None => continue,
            }
        } else {
            kind
        };
        let name = format!("{prefix}{file_name}");
        if kind == FileType::Directory {
            match dir.descend(&file_name, false) {
                Ok(Some(sub)) => walk_refs(&sub, &format!("{name}/"), visit)?,
                // A namespace others may write to: its refs cannot be
                // trusted, nor left out (GC would free what they reach).
                Err(e @ Error::Untrusted(_)) => return Err(e),
                // Raced away or swapped for a link: skip it.
                _ => {}
            }
        } else if kind == FileType::RegularFile {
            visit(&name, dir, &file_name);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Options;
    use proptest::prelude::*;
    use std::path::Path;

    #[test]
    fn invalid_names() {
        for bad in [
            "",
            "/abs",
            "a/../b",
            "..",
            ".",
            "a//b",
            "a/",
            ".hidden",
            "a/.b",
            "a\\b",
            "a\0b",
            "a\x1b[31m",
            "a\rb",
            "a\nb",
            "tab\t",
            "del\x7f",
            "c1\u{9b}2J",
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
