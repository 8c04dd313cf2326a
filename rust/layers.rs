//! Guards the crate's layering: top-level modules depend only on modules in lower layers,
//! so the module graph stays a DAG.
//!
//! ```text
//! python          the PyO3 binding
//! transfer        export/import between a store and a bundle
//! store | bundle  peers: neither may name the other
//! lock
//! base            primitives shared by store and bundle
//! progress
//! error, hash     one unit: `Error` names digests, and parsing a `Digest` fails with `Error`
//! pool
//! ```
//!
//! The check reads the `crate::<module>` paths in every source file, so a new top-level
//! module must be given a layer here before anything may depend on it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Each top-level module's layer; a module may name only modules of a lower layer.
const LAYERS: &[(&str, u32)] = &[
    ("pool", 0),
    ("error", 1),
    ("hash", 1),
    ("progress", 2),
    ("base", 3),
    ("lock", 4),
    ("store", 5),
    ("bundle", 5),
    ("transfer", 6),
    ("python", 7),
];

/// Same-layer pairs allowed to name each other (see the module docs for why).
const ONE_UNIT: &[(&str, &str)] = &[("error", "hash"), ("hash", "error")];

/// Files that are not part of the graph: the crate root wires every module together, and
/// this file names modules in its tables.
const SKIPPED: &[&str] = &["lib", "layers"];

fn layer(module: &str) -> Option<u32> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("source directory is readable") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to: `rust/store/gc.rs` and `rust/store.rs` are `store`.
fn top_module(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).expect("file under the source root");
    let first = rel.components().next().expect("non-empty path");
    let name = first.as_os_str().to_string_lossy();
    name.strip_suffix(".rs").unwrap_or(&name).to_owned()
}

/// The modules named by `crate::<name>` paths in `text`. `crate::{` is reported as `{`,
/// and a root re-export (`crate::Error`) by its own name: no layer admits them, so every
/// path names the module it reaches into.
fn named_modules(text: &str) -> Vec<String> {
    text.match_indices("crate::")
        .filter(|(at, _)| {
            // `$crate::` and identifiers ending in "crate" are not crate paths.
            let before = text[..*at].chars().next_back();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$')
        })
        .map(|(at, m)| {
            let rest = &text[at + m.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if end == 0 {
                rest.chars().take(1).collect()
            } else {
                rest[..end].to_owned()
            }
        })
        .collect()
}

/// Every dependency that breaks the layering, as `file: from -> to`.
fn violations(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    sources(root, &mut files);
    files.sort();
    let mut bad = Vec::new();
    for file in files {
        let from = top_module(root, &file);
        if SKIPPED.contains(&from.as_str()) {
            continue;
        }
        let Some(from_layer) = layer(&from) else {
            bad.push(format!("{}: module {from} has no layer", file.display()));
            continue;
        };
        let text = fs::read_to_string(&file).expect("source is UTF-8");
        let mut seen = BTreeMap::new();
        for to in named_modules(&text) {
            if to == from || ONE_UNIT.contains(&(from.as_str(), to.as_str())) {
                continue;
            }
            let ok = layer(&to).is_some_and(|to_layer| to_layer < from_layer);
            if !ok {
                seen.insert(to.clone(), ());
            }
        }
        for to in seen.keys() {
            bad.push(format!("{}: {from} -> {to}", file.display()));
        }
    }
    bad
}

#[test]
fn modules_depend_only_downward() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("rust");
    let bad = violations(&root);
    assert!(
        bad.is_empty(),
        "upward or cyclic module dependencies:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_check_catches_an_upward_dependency() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::create_dir(dir.path().join("store")).expect("mkdir");
    fs::write(
        dir.path().join("store/blob.rs"),
        "use crate::bundle::BlobView;\nuse crate::base::Blob;\n",
    )
    .expect("write");
    fs::write(dir.path().join("base.rs"), "use crate::{store, hash};\n").expect("write");
    fs::write(dir.path().join("hash.rs"), "use crate::error::Error;\n").expect("write");
    let bad = violations(dir.path());
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(bad[0].ends_with("base -> {"), "{bad:?}");
    assert!(bad[1].ends_with("store -> bundle"), "{bad:?}");
}
