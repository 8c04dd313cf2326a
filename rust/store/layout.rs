//! Where things live under a store root, and the versioned `FORMAT` file.
//!
//! ```text
//! <root>/FORMAT                  "precompile-store\n1\n"
//! <root>/objects/<2 hex>/<62 hex> raw content, named by its blake3 digest
//! <root>/refs/<name>             "<64 hex>\n"; names may contain '/'
//! <root>/tmp/                    in-flight writes
//! <root>/locks/gc.lock           the GC lock (see `lock.rs`)
//! <root>/locks/gc.gate           passed before taking it, so GC cannot starve
//! ```

use std::fs;
use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};

use crate::base::beneath::Dir;
use crate::base::durable::{fsync_dir, TmpFile};
use crate::error::{Error, IoContext, Result};
use crate::hash::Digest;

/// First line of `FORMAT`.
pub const FORMAT_MAGIC: &str = "precompile-store";
/// The layout version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;

const SUBDIRS: [&str; 4] = ["objects", "refs", "tmp", "locks"];

/// The open directories of one store. Everything inside the store is reached
/// through these descriptors, never by following a path (see `beneath.rs`).
#[derive(Clone, Debug)]
pub struct Dirs {
    /// The store root.
    pub root: Dir,
    /// `objects/`.
    pub objects: Dir,
    /// `refs/`.
    pub refs: Dir,
    /// `tmp/`.
    pub tmp: Dir,
    /// `locks/`.
    pub locks: Dir,
}

impl Dirs {
    /// Opens the subdirectories of `root`, recreating a deleted one when the
    /// store is writable; a symlink in their place is refused.
    fn open(root: Dir) -> Result<Dirs> {
        Ok(Dirs {
            objects: root.sub("objects", true)?,
            refs: root.sub("refs", true)?,
            tmp: root.sub("tmp", true)?,
            locks: root.sub("locks", true)?,
            root,
        })
    }
}

/// The paths of one store.
#[derive(Clone, Debug)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    /// A layout rooted at `root` (nothing is touched on disk).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Layout { root: root.into() }
    }

    /// The store root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `objects/`.
    pub fn objects_dir(&self) -> PathBuf {
        self.root.join("objects")
    }

    /// `refs/`.
    pub fn refs_dir(&self) -> PathBuf {
        self.root.join("refs")
    }

    /// `tmp/`.
    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// `locks/gc.lock`.
    pub fn gc_lock(&self) -> PathBuf {
        self.root.join("locks").join("gc.lock")
    }

    /// `locks/gc.gate`.
    pub fn gc_gate(&self) -> PathBuf {
        self.root.join("locks").join("gc.gate")
    }

    /// `FORMAT`.
    pub fn format_file(&self) -> PathBuf {
        self.root.join("FORMAT")
    }

    /// `objects/<first 2 hex>/<other 62 hex>`: 256 fan-out directories keep
    /// each directory small enough for fast lookups on any filesystem.
    pub fn object_path(&self, digest: &Digest) -> PathBuf {
        let hex = digest.to_hex();
        self.objects_dir().join(&hex[..2]).join(&hex[2..])
    }

    /// Opens the store at the root, creating it when `create` is set.
    ///
    /// `FORMAT` is written last and atomically, so its presence means the
    /// layout is complete; concurrent creators race harmlessly.
    pub fn open(&self, create: bool) -> Result<Dirs> {
        let format = self.format_file();
        match read_format(&self.root) {
            Ok((root, text)) => {
                check_format(&text, &format)?;
                // Recreate a deleted tmp/ or locks/; a no-op normally.
                Dirs::open(root)
            }
            Err(e) if e.kind() == ErrorKind::NotFound && create => {
                self.init()?;
                Dirs::open(Dir::open_root(&self.root)?)
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Err(Error::io(
                &self.root,
                io::Error::new(
                    ErrorKind::NotFound,
                    "no precompile store here (create=False)",
                ),
            )),
            Err(e) => Err(Error::io(format, e)),
        }
    }

    fn init(&self) -> Result<()> {
        fs::create_dir_all(&self.root).at(&self.root)?;
        // Refuse to scatter our directories over somebody's unrelated data.
        for entry in fs::read_dir(&self.root).at(&self.root)? {
            let name = entry.at(&self.root)?.file_name();
            if !SUBDIRS.iter().any(|s| name == *s) && name != "FORMAT" {
                return Err(Error::Format(format!(
                    "{} is not empty and is not a precompile store (no FORMAT file)",
                    self.root.display()
                )));
            }
        }
        for sub in SUBDIRS {
            fs::create_dir_all(self.root.join(sub)).at(&self.root.join(sub))?;
        }
        // All 256 fan-out directories up front: writers then never create
        // directories (and fsync their parent) on the hot path.
        let objects = self.objects_dir();
        for fan in 0..=255u8 {
            let dir = objects.join(format!("{fan:02x}"));
            fs::create_dir_all(&dir).at(&dir)?;
        }
        fsync_dir(&objects)?;
        for lock in [self.gc_lock(), self.gc_gate()] {
            fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&lock)
                .at(&lock)?;
        }
        fsync_dir(&self.root)?;

        let root = Dir::open_root(&self.root)?;
        let tmp_dir = root.sub("tmp", false)?;
        let content = format!("{FORMAT_MAGIC}\n{FORMAT_VERSION}\n");
        let tmp = TmpFile::write(&tmp_dir, content.as_bytes())?;
        // link, not rename: a concurrent creator's FORMAT is never replaced.
        if tmp.link_to(&root, "FORMAT")? {
            root.fsync()?;
        } else {
            let text = fs::read_to_string(self.format_file()).at(&self.format_file())?;
            check_format(&text, &self.format_file())?;
        }
        Ok(())
    }
}

/// Opens the root and reads its `FORMAT` file without following a link.
fn read_format(root: &Path) -> io::Result<(Dir, String)> {
    let dir = Dir::open_root(root).map_err(|e| match e {
        Error::Io { source, .. } => source,
        other => io::Error::other(other.to_string()),
    })?;
    let mut text = String::new();
    io::Read::read_to_string(
        &mut dir.open("FORMAT", rustix::fs::OFlags::RDONLY, 0)?,
        &mut text,
    )?;
    Ok((dir, text))
}

/// Checks the text of a `FORMAT` file.
pub fn check_format(text: &str, path: &Path) -> Result<()> {
    let mut lines = text.lines();
    if lines.next() != Some(FORMAT_MAGIC) {
        return Err(Error::Format(format!(
            "{} does not start with {FORMAT_MAGIC:?}: not a precompile store",
            path.display()
        )));
    }
    let version = lines.next().unwrap_or("").trim();
    if version != FORMAT_VERSION.to_string() {
        return Err(Error::Format(format!(
            "{}: store format version {version:?} is not supported (this build reads version {FORMAT_VERSION})",
            path.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn format_versions() {
        let p = Path::new("FORMAT");
        assert!(check_format("precompile-store\n1\n", p).is_ok());
        assert!(matches!(
            check_format("precompile-store\n2\n", p),
            Err(Error::Format(_))
        ));
        assert!(matches!(
            check_format("something-else\n1\n", p),
            Err(Error::Format(_))
        ));
        assert!(matches!(check_format("", p), Err(Error::Format(_))));
    }

    #[test]
    fn open_creates_then_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path().join("s"));
        assert!(layout.open(false).unwrap_err().is_not_found());
        layout.open(true).unwrap();
        layout.open(true).unwrap();
        layout.open(false).unwrap();
        let text = fs::read_to_string(layout.format_file()).unwrap();
        assert_eq!(text, "precompile-store\n1\n");
        assert_eq!(fs::read_dir(layout.tmp_dir()).unwrap().count(), 0);
    }

    #[test]
    fn refuses_foreign_directory() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("notes.txt"), "mine").unwrap();
        assert!(matches!(
            Layout::new(dir.path()).open(true),
            Err(Error::Format(_))
        ));
    }

    proptest! {
        #[test]
        fn object_path_fans_out(bytes in proptest::array::uniform32(any::<u8>())) {
            let d = Digest::from(blake3::Hash::from_bytes(bytes));
            let layout = Layout::new("/s");
            let p = layout.object_path(&d);
            let hex = d.to_hex();
            prop_assert_eq!(p.parent().unwrap(), Path::new("/s/objects").join(&hex[..2]));
            let name = p.file_name().unwrap().to_str().unwrap();
            prop_assert_eq!(name.len(), 62);
            prop_assert_eq!(format!("{}{}", &hex[..2], name), hex);
        }
    }
}
