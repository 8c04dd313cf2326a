//! Who may write to a store, checked on every directory (see `base/owner.rs`).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::store::{Options, Store};

fn open(root: &Path, shared: bool) -> Result<Store> {
    Store::open(
        root,
        Options {
            shared,
            create: false,
            ..Options::default()
        },
    )
}

#[test]
fn own_private_store_passes_and_loose_modes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s");
    Store::open(&root, Options::default()).unwrap();
    open(&root, false).unwrap();

    fs::set_permissions(&root, fs::Permissions::from_mode(0o777)).unwrap();
    for shared in [false, true] {
        let err = open(&root, shared).unwrap_err();
        assert!(matches!(err, Error::Untrusted(_)), "{err}");
    }

    fs::set_permissions(&root, fs::Permissions::from_mode(0o775)).unwrap();
    let err = open(&root, false).unwrap_err();
    assert!(err.to_string().contains("writable by group"), "{err}");
    // Shared, but not setgid: new files would not keep the group.
    let err = open(&root, true).unwrap_err();
    assert!(err.to_string().contains("setgid"), "{err}");
    fs::set_permissions(&root, fs::Permissions::from_mode(0o2775)).unwrap();
    for sub in ["objects", "refs", "tmp", "locks"] {
        fs::set_permissions(root.join(sub), fs::Permissions::from_mode(0o2775)).unwrap();
    }
    open(&root, true).unwrap();

    fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(root.join("refs"), fs::Permissions::from_mode(0o757)).unwrap();
    assert!(matches!(open(&root, false), Err(Error::Untrusted(_))));
}

#[test]
fn every_directory_is_checked_not_only_the_top_ones() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s");
    let s = Store::open(&root, Options::default()).unwrap();
    let d = s.put(b"x").unwrap().digest;
    s.set_ref("ns/deeper/name", &d).unwrap();
    drop(s);
    let deep = root.join("refs/ns/deeper");
    fs::set_permissions(&deep, fs::Permissions::from_mode(0o777)).unwrap();
    let s = open(&root, false).unwrap();
    assert!(matches!(
        s.get_ref("ns/deeper/name"),
        Err(Error::Untrusted(_))
    ));
    assert!(matches!(s.refs(""), Err(Error::Untrusted(_))));
    assert!(matches!(
        s.gc(false, std::time::Duration::ZERO),
        Err(Error::Untrusted(_))
    ));
    fs::set_permissions(&deep, fs::Permissions::from_mode(0o755)).unwrap();
    let fan = root.join("objects").join(&d.to_hex()[..2]);
    fs::set_permissions(&fan, fs::Permissions::from_mode(0o777)).unwrap();
    assert!(matches!(open(&root, false), Err(Error::Untrusted(_))));
}
