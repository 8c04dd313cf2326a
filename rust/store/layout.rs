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
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;

use crate::base::beneath::Dir;
use crate::base::durable::TmpFile;
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
        let objects = root.sub("objects", true)?;
        for fan in 0..=255u8 {
            objects.check_entry(&format!("{fan:02x}"))?;
        }
        Ok(Dirs {
            objects,
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
    /// Who may write to it is checked on the opened root descriptor, and on
    /// every directory opened beneath it (`base/owner.rs`); with `shared` a
    /// setgid group-writable store, or another user's, is accepted.
    /// Everything is created with explicit modes, never writable by other
    /// users whatever the umask, so a store this opens it also accepts.
    ///
    /// `FORMAT` is written last and atomically, so its presence means the
    /// layout is complete; concurrent creators race harmlessly.
    pub fn open(&self, create: bool, shared: bool) -> Result<Dirs> {
        let format = self.format_file();
        let made_root = create && self.make_root(shared)?;
        let root = match Dir::open_store_root(&self.root, shared) {
            Ok(root) => root,
            Err(e) if e.is_not_found() && !create => return Err(self.no_store()),
            Err(e) => {
                if made_root {
                    // Ours, and still empty: leave nothing behind.
                    let _ = fs::remove_dir(&self.root);
                }
                return Err(e);
            }
        };
        match read_format(&root) {
            Ok(text) => {
                check_format(&text, &format)?;
                // Recreate a deleted tmp/ or locks/; a no-op normally.
                Dirs::open(root)
            }
            Err(e) if e.kind() == ErrorKind::NotFound && create => {
                self.init(&root)?;
                Dirs::open(root)
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Err(self.no_store()),
            Err(e) => Err(Error::io(format, e)),
        }
    }

    fn no_store(&self) -> Error {
        Error::io(
            &self.root,
            io::Error::new(
                ErrorKind::NotFound,
                "no precompile store here (create=False)",
            ),
        )
    }

    /// Creates the root directory (and any missing parents, which are not
    /// the store's); true when this call made the root itself.
    ///
    /// The mode is never writable by other users, whatever the umask: what
    /// the umask leaves of `0755`; or, for a store opened as shared inside a
    /// setgid group-writable directory (the shared store's group), exactly
    /// `02775`, so the group's members can write it.
    fn make_root(&self, shared: bool) -> Result<bool> {
        let mut mode = 0o755;
        if let Some(parent) = self.root.parent() {
            // A failure here shows as the mkdir's own error below, which
            // names the root (ENOTDIR under a file, say).
            let _ = fs::create_dir_all(parent);
            let parent_mode = fs::metadata(parent).map_or(0, |m| m.permissions().mode());
            if shared && parent_mode & 0o2020 == 0o2020 {
                mode = 0o2775;
            }
        }
        match rustix::fs::mkdir(&self.root, rustix::fs::Mode::from_raw_mode(mode & 0o777)) {
            Ok(()) => {}
            Err(rustix::io::Errno::EXIST) => return Ok(false),
            // A read-only mount or parent may refuse even an existing name:
            // then opening it decides.
            Err(_) if self.root.is_dir() => return Ok(false),
            Err(e) => return Err(Error::io(&self.root, e.into())),
        }
        // The umask may have taken the group's write bit away (a private
        // root keeps what the umask left of 0755), and a default ACL may
        // have added write bits: set it exactly, never following a link
        // planted in its place meanwhile.
        let io = |e: rustix::io::Errno| Error::io(&self.root, e.into());
        let fd = rustix::fs::open(
            &self.root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(io)?;
        if mode != 0o2775 {
            mode = rustix::fs::fstat(&fd).map_err(io)?.st_mode & 0o7755;
        }
        rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(mode)).map_err(io)?;
        Ok(true)
    }

    fn init(&self, root: &Dir) -> Result<()> {
        // Refuse to scatter our directories over somebody's unrelated data.
        for (name, _) in root.entries()? {
            if !SUBDIRS.iter().any(|s| name == *s) && name != "FORMAT" {
                return Err(Error::Format(format!(
                    "{} is not empty and is not a precompile store (no FORMAT file)",
                    self.root.display()
                )));
            }
        }
        // Each directory is created through its parent's descriptor with the
        // parent's mode (see `beneath.rs`) and checked once open.
        let mut dirs = Vec::with_capacity(SUBDIRS.len());
        for sub in SUBDIRS {
            dirs.push(root.sub(sub, true)?);
        }
        let (objects, locks) = (&dirs[0], &dirs[3]);
        // All 256 fan-out directories up front: writers then never create
        // directories (and fsync their parent) on the hot path.
        for fan in 0..=255u8 {
            objects.sub(&format!("{fan:02x}"), true)?;
        }
        objects.fsync()?;
        for lock in ["gc.lock", "gc.gate"] {
            locks
                .open(lock, OFlags::WRONLY | OFlags::CREATE, 0o644)
                .map_err(|e| Error::io(locks.path().join(lock), e))?;
        }
        locks.fsync()?;
        root.fsync()?;

        let tmp_dir = &dirs[2];
        let content = format!("{FORMAT_MAGIC}\n{FORMAT_VERSION}\n");
        let tmp = TmpFile::write(tmp_dir, content.as_bytes())?;
        // link, not rename: a concurrent creator's FORMAT is never replaced.
        if tmp.link_to(root, "FORMAT")? {
            root.fsync()?;
        } else {
            let text = read_format(root).at(&self.format_file())?;
            check_format(&text, &self.format_file())?;
        }
        Ok(())
    }
}

/// Reads the root's `FORMAT` file without following a link.
fn read_format(root: &Dir) -> io::Result<String> {
    let mut text = String::new();
    io::Read::read_to_string(&mut root.open("FORMAT", OFlags::RDONLY, 0)?, &mut text)?;
    Ok(text)
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
        assert!(layout.open(false, false).unwrap_err().is_not_found());
        layout.open(true, false).unwrap();
        layout.open(true, false).unwrap();
        layout.open(false, false).unwrap();
        let text = fs::read_to_string(layout.format_file()).unwrap();
        assert_eq!(text, "precompile-store\n1\n");
        assert_eq!(fs::read_dir(layout.tmp_dir()).unwrap().count(), 0);
    }

    #[test]
    fn refuses_foreign_directory() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("notes.txt"), "mine").unwrap();
        assert!(matches!(
            Layout::new(dir.path()).open(true, false),
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
