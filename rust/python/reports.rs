//! The reports `Store` and `Bundle` methods return, as frozen Python classes.
//!
//! Each class is declared once by [`report!`], which also writes its `to_dict` (the
//! report's fields as a plain dict, keys named like the attributes, for JSON output) and its
//! `__repr__`; the `From` conversions below are the one place the core's report structs
//! become Python values.

use std::collections::BTreeMap;
use std::time::UNIX_EPOCH;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use pyo3::IntoPyObjectExt;

use crate::bundle;
use crate::hash::Digest;
use crate::store;

/// A field value as a plain Python value: what `to_dict` stores under the field's key.
trait Plain {
    fn plain<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>>;
}

macro_rules! plain_as_is {
    ($($ty:ty),*) => {$(
        impl Plain for $ty {
            fn plain<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
                self.clone().into_bound_py_any(py)
            }
        }
    )*};
}

plain_as_is!(
    u64,
    bool,
    String,
    Vec<String>,
    Option<f64>,
    BTreeMap<String, Vec<String>>
);

impl Plain for Vec<RefUsage> {
    fn plain<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let items = self
            .iter()
            .map(|r| r.to_dict(py))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyList::new(py, items)?.into_any())
    }
}

/// Declares a report class: its fields (exposed read-only), `to_dict` and `__repr__`.
macro_rules! report {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$doc])*
        #[pyclass(frozen, get_all, module = "precompile._core")]
        #[derive(Clone, Debug)]
        pub struct $name {
            $($(#[$fdoc])* pub $field: $ty,)*
        }

        #[pymethods]
        impl $name {
            /// The report as a plain dict, one key per attribute (JSON-ready).
            pub fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
                let d = PyDict::new(py);
                $(d.set_item(stringify!($field), self.$field.plain(py)?)?;)*
                Ok(d)
            }

            fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
                // Through the attributes, so nested reports show as classes, not dicts.
                let fields = [$(
                    format!("{}={}", stringify!($field), slf.getattr(stringify!($field))?.repr()?),
                )*];
                Ok(format!("{}({})", stringify!($name), fields.join(", ")))
            }
        }
    };
}

report!(
    /// What `Store.gc` swept (or, with `dry_run`, would sweep).
    GcReport {
        objects_freed: u64,
        bytes_freed: u64,
        objects_kept: u64,
        tmp_freed: u64,
        dry_run: bool,
    }
);

report!(
    /// What `Store.evict` did: the refs it deleted, the store's size before and after, and
    /// the sweep that followed.
    EvictReport {
        refs_evicted: Vec<String>,
        bytes_before: u64,
        bytes_after: u64,
        objects_freed: u64,
        bytes_freed: u64,
        objects_kept: u64,
        tmp_freed: u64,
        dry_run: bool,
    }
);

report!(
    /// What `Store.verify` found: digests of corrupt objects, of objects refs reach that are
    /// missing, and of manifests in a version this build cannot read.
    VerifyReport {
        objects: u64,
        bytes: u64,
        corrupt: Vec<String>,
        missing: Vec<String>,
        unknown: Vec<String>,
        /// For each damaged digest refs reach, the names of those refs.
        holders: BTreeMap<String, Vec<String>>,
        ok: bool,
    }
);

report!(
    /// `Store.stats`: objects, bytes and refs on disk; puts, gets and dedup hits since open.
    Stats {
        objects: u64,
        bytes: u64,
        refs: u64,
        dedup_hits: u64,
        puts: u64,
        gets: u64,
        misses: u64,
    }
);

report!(
    /// One ref in `Store.usage`: its closure's size, and what only it holds. `mtime` is the
    /// ref's last use in seconds since the epoch, or None if unknown.
    RefUsage {
        name: String,
        digest: String,
        mtime: Option<f64>,
        objects: u64,
        bytes: u64,
        unique_bytes: u64,
        missing: u64,
    }
);

report!(
    /// `Store.usage`: each ref's closure size and the store's totals.
    Usage {
        refs: Vec<RefUsage>,
        objects: u64,
        bytes: u64,
        reachable_bytes: u64,
        logical_bytes: u64,
    }
);

report!(
    /// What `Store.export_bundle` wrote.
    ExportReport {
        blobs: u64,
        refs: u64,
        bytes: u64,
    }
);

report!(
    /// What `Store.import_bundle` did.
    ImportReport {
        objects_new: u64,
        objects_present: u64,
        bytes_new: u64,
        refs: u64,
        refs_changed: u64,
        objects_repaired: u64,
    }
);

report!(
    /// What `Bundle.verify` found: the digests of blobs that do not hash to their name.
    BundleVerifyReport {
        blobs: u64,
        bytes: u64,
        corrupt: Vec<String>,
        ok: bool,
    }
);

report!(
    /// `Bundle.stats`: blobs, bytes (of the file) and refs; gets and misses since open.
    BundleStats {
        blobs: u64,
        bytes: u64,
        refs: u64,
        gets: u64,
        misses: u64,
    }
);

fn hexes(digests: &[Digest]) -> Vec<String> {
    digests.iter().map(Digest::to_hex).collect()
}

fn raw_hexes(digests: &[[u8; 32]]) -> Vec<String> {
    digests
        .iter()
        .map(|d| Digest::from(blake3::Hash::from_bytes(*d)).to_hex())
        .collect()
}

impl From<store::GcReport> for GcReport {
    fn from(r: store::GcReport) -> Self {
        GcReport {
            objects_freed: r.objects_freed,
            bytes_freed: r.bytes_freed,
            objects_kept: r.objects_kept,
            tmp_freed: r.tmp_freed,
            dry_run: r.dry_run,
        }
    }
}

impl From<store::EvictReport> for EvictReport {
    fn from(r: store::EvictReport) -> Self {
        EvictReport {
            refs_evicted: r.refs_evicted,
            bytes_before: r.bytes_before,
            bytes_after: r.bytes_after,
            objects_freed: r.gc.objects_freed,
            bytes_freed: r.gc.bytes_freed,
            objects_kept: r.gc.objects_kept,
            tmp_freed: r.gc.tmp_freed,
            dry_run: r.gc.dry_run,
        }
    }
}

impl From<store::VerifyReport> for VerifyReport {
    fn from(r: store::VerifyReport) -> Self {
        VerifyReport {
            ok: r.ok(),
            objects: r.objects,
            bytes: r.bytes,
            corrupt: hexes(&r.corrupt),
            missing: hexes(&r.missing),
            unknown: hexes(&r.unknown),
            holders: (r.holders.into_iter())
                .map(|(digest, names)| (digest.to_hex(), names))
                .collect(),
        }
    }
}

impl From<store::Stats> for Stats {
    fn from(s: store::Stats) -> Self {
        Stats {
            objects: s.objects,
            bytes: s.bytes,
            refs: s.refs,
            dedup_hits: s.dedup_hits,
            puts: s.puts,
            gets: s.gets,
            misses: s.misses,
        }
    }
}

impl From<store::RefUsage> for RefUsage {
    fn from(r: store::RefUsage) -> Self {
        RefUsage {
            digest: r.digest.to_hex(),
            mtime: r.mtime.map(|t| {
                let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                since.as_secs_f64()
            }),
            name: r.name,
            objects: r.objects,
            bytes: r.bytes,
            unique_bytes: r.unique_bytes,
            missing: r.missing,
        }
    }
}

impl From<store::Usage> for Usage {
    fn from(u: store::Usage) -> Self {
        Usage {
            refs: u.refs.into_iter().map(RefUsage::from).collect(),
            objects: u.objects,
            bytes: u.bytes,
            reachable_bytes: u.reachable_bytes,
            logical_bytes: u.logical_bytes,
        }
    }
}

impl From<bundle::BundleSummary> for ExportReport {
    fn from(s: bundle::BundleSummary) -> Self {
        ExportReport {
            blobs: s.blobs,
            refs: s.refs,
            bytes: s.bytes,
        }
    }
}

impl From<crate::transfer::ImportReport> for ImportReport {
    fn from(r: crate::transfer::ImportReport) -> Self {
        ImportReport {
            objects_new: r.objects_new,
            objects_present: r.objects_present,
            bytes_new: r.bytes_new,
            refs: r.refs,
            refs_changed: r.refs_changed,
            objects_repaired: r.objects_repaired,
        }
    }
}

impl From<bundle::VerifyReport> for BundleVerifyReport {
    fn from(r: bundle::VerifyReport) -> Self {
        BundleVerifyReport {
            ok: r.corrupt.is_empty(),
            blobs: r.blobs,
            bytes: r.bytes,
            corrupt: raw_hexes(&r.corrupt),
        }
    }
}

impl BundleStats {
    /// The stats of `bundle`, with the read counters its Python handle keeps.
    pub fn of(bundle: &bundle::Bundle, gets: u64, misses: u64) -> Self {
        BundleStats {
            blobs: bundle.len() as u64,
            bytes: bundle.file_len(),
            refs: bundle.refs().len() as u64,
            gets,
            misses,
        }
    }
}
