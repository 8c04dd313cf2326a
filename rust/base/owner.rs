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

use std::path::Path;

use crate::error::{Error, Result};

const SETGID: u32 = 0o2000;
const GROUP_WRITE: u32 = 0o020;
const OTHER_WRITE: u32 = 0o002;

/// Checks one directory of a store, from the status of its open descriptor
/// (`fstat`): checking a path and then opening it would let whoever can
/// write to a parent swap the directory in between.
pub(crate) fn check_stat(dir: &Path, st: &rustix::fs::Stat, shared: bool) -> Result<()> {
    check_mode(dir, st.st_mode, st.st_uid, st.st_gid, shared)
}

fn check_mode(dir: &Path, mode: u32, owner: u32, group: u32, shared: bool) -> Result<()> {
    let refuse = |why: String| {
        Err(Error::Untrusted(format!(
            "refusing the store at {}: {why}",
            dir.display()
        )))
    };
    // SAFETY: geteuid never fails and touches no memory.
    let uid = unsafe { libc::geteuid() };
    if mode & OTHER_WRITE != 0 {
        return refuse(format!(
            "it is writable by every user (mode {:o})",
            mode & 0o7777
        ));
    }
    if !shared && owner != uid {
        return refuse(format!(
            "it is owned by uid {owner}, not by you (uid {uid}); open it as a shared store to trust its owner"
        ));
    }
    if mode & GROUP_WRITE != 0 {
        if !shared {
            return refuse(format!(
                "it is writable by group {group} (mode {:o}); open it as a shared store to trust that group",
                mode & 0o7777
            ));
        }
        if mode & SETGID == 0 {
            return refuse(format!(
                "a group-writable shared store must be setgid (mode {:o}; chmod g+s)",
                mode & 0o7777
            ));
        }
        if !in_group(group) {
            return refuse(format!(
                "it is writable by group {group}, which you are not a member of"
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
