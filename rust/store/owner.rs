//! Who may have written a store: a store is code (loading an entry unpickles it and maps
//! its shared libraries), so it is only as trustworthy as everyone who can write to it.
//!
//! A private store must belong to the user opening it and be writable by nobody else. A
//! store opened as shared (`Options::shared`) may belong to another user and be writable
//! by its group, provided the directory is setgid (new files keep the group) and that
//! group is one of the caller's: opening it says "I trust that group". A directory every
//! user may write to is refused either way: anyone on the machine could plant entries.
//! Root gets no exemption: a root process that loads another user's store runs that
//! user's code as root.

use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{Error, IoContext, Result};

const SETGID: u32 = 0o2000;
const GROUP_WRITE: u32 = 0o020;
const OTHER_WRITE: u32 = 0o002;

/// Checks the store root and its top-level directories; a path that does not exist yet
/// passes (it will be created by this user).
pub(crate) fn check(root: &Path, shared: bool) -> Result<()> {
    for dir in [
        root.to_path_buf(),
        root.join("objects"),
        root.join("refs"),
        root.join("tmp"),
        root.join("locks"),
    ] {
        match fs::metadata(&dir) {
            Ok(meta) => check_dir(&dir, &meta, shared)?,
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e).at(&dir),
        }
    }
    Ok(())
}

fn check_dir(dir: &Path, meta: &fs::Metadata, shared: bool) -> Result<()> {
    let refuse = |why: String| {
        Err(Error::Untrusted(format!(
            "refusing the store at {}: {why}",
            dir.display()
        )))
    };
    let mode = meta.mode();
    // SAFETY: geteuid never fails and touches no memory.
    let uid = unsafe { libc::geteuid() };
    if mode & OTHER_WRITE != 0 {
        return refuse(format!(
            "it is writable by every user (mode {:o})",
            mode & 0o7777
        ));
    }
    if !shared && meta.uid() != uid {
        return refuse(format!(
            "it is owned by uid {}, not by you (uid {uid}); open it as a shared store to trust its owner",
            meta.uid()
        ));
    }
    if mode & GROUP_WRITE != 0 {
        if !shared {
            return refuse(format!(
                "it is writable by group {} (mode {:o}); open it as a shared store to trust that group",
                meta.gid(),
                mode & 0o7777
            ));
        }
        if mode & SETGID == 0 {
            return refuse(format!(
                "a group-writable shared store must be setgid (mode {:o}; chmod g+s)",
                mode & 0o7777
            ));
        }
        if !in_group(meta.gid()) {
            return refuse(format!(
                "it is writable by group {}, which you are not a member of",
                meta.gid()
            ));
        }
    }
    Ok(())
}

/// Whether the calling process has `gid` as its effective or a supplementary group.
fn in_group(gid: u32) -> bool {
    // SAFETY: getegid never fails; getgroups writes at most `n` entries into a buffer of
    // that many, and with 0 only returns the count.
    unsafe {
        if libc::getegid() == gid {
            return true;
        }
        let n = libc::getgroups(0, std::ptr::null_mut());
        if n <= 0 {
            return false;
        }
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let got = libc::getgroups(n, groups.as_mut_ptr());
        got > 0 && groups[..got as usize].contains(&gid)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::store::{Options, Store};

    #[test]
    fn own_private_store_passes_and_loose_modes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("s");
        Store::open(&root, Options::default()).unwrap();
        check(&root, false).unwrap();

        fs::set_permissions(&root, fs::Permissions::from_mode(0o777)).unwrap();
        for shared in [false, true] {
            let err = Store::open(
                &root,
                Options {
                    shared,
                    ..Options::default()
                },
            )
            .unwrap_err();
            assert!(matches!(err, Error::Untrusted(_)), "{err}");
        }

        fs::set_permissions(&root, fs::Permissions::from_mode(0o775)).unwrap();
        let err = check(&root, false).unwrap_err();
        assert!(err.to_string().contains("writable by group"), "{err}");
        // Shared, but not setgid: new files would not keep the group.
        let err = check(&root, true).unwrap_err();
        assert!(err.to_string().contains("setgid"), "{err}");
        fs::set_permissions(&root, fs::Permissions::from_mode(0o2775)).unwrap();
        check(&root, true).unwrap();

        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(root.join("refs"), fs::Permissions::from_mode(0o757)).unwrap();
        assert!(matches!(check(&root, false), Err(Error::Untrusted(_))));
    }

    #[test]
    fn a_missing_store_passes() {
        let dir = tempfile::tempdir().unwrap();
        check(&dir.path().join("absent"), false).unwrap();
    }
}
