//! Export: packs refs and everything they reach from a store into one bundle file.

use std::path::Path;

use crate::bundle::{BundleSummary, BundleWriter, SecretKey};
use crate::error::{Error, Result};
use crate::lock::LockMode;
use crate::progress::Progress;
use crate::store::mark::{Marked, Strictness};
use crate::store::Store;

impl Store {
    /// Writes a bundle at `path` holding the refs `names` and every object
    /// they reach, directly or through manifests.
    ///
    /// Objects are laid out depth-first from each ref, so the blobs of one
    /// entry sit together in the file and prefetch as one range. Each object
    /// is rehashed as it is copied, so a corrupt object fails the export
    /// (`Error::Corrupt`) rather than ship; an unknown ref name is
    /// `Error::NoSuchRef`, an unreachable object `Error::Missing`. The GC
    /// lock is held shared throughout, so GC cannot sweep what is being
    /// packed; writers carry on. The bundle appears at `path` complete or
    /// not at all.
    pub fn export_bundle(&self, names: &[String], path: &Path) -> Result<BundleSummary> {
        self.export_bundle_with(names, path, None, &Progress::new())
    }

    /// [`export_bundle`](Self::export_bundle), signed with `sign` when
    /// given, counting copied bytes into `progress` and stopping (leaving no
    /// file) once it is cancelled.
    pub fn export_bundle_with(
        &self,
        names: &[String],
        path: &Path,
        sign: Option<&SecretKey>,
        progress: &Progress,
    ) -> Result<BundleSummary> {
        let _lock = self.lock(LockMode::Shared)?;
        let mut named = Vec::with_capacity(names.len());
        for name in names {
            match self.get_ref(name)? {
                Some(digest) => named.push((name, digest)),
                None => return Err(Error::NoSuchRef(name.clone())),
            }
        }
        let mut marked = Marked::default();
        self.mark(named.iter().map(|(_, d)| *d), Strictness::Fail, &mut marked)?;
        if let Some(digest) = marked.missing.first() {
            return Err(Error::Missing { digest: *digest });
        }
        // Sizes first, for the progress total; each object is opened again
        // as it is copied, so one descriptor is open at a time whatever the
        // object count (not one per object: a bundle of many thousand
        // objects would hit the open-file limit). The lock keeps GC from
        // removing them in between.
        let mut total = 0;
        for digest in &marked.order {
            total += self.object_size(digest)?;
        }
        progress.set_total(total);

        let mut writer = BundleWriter::create(path)?;
        for digest in &marked.order {
            progress.check(path)?;
            // Through the store's own directories, following no link.
            let (file, st) = self.open_object(digest)?;
            writer.add_blob_from_reader(*digest.as_bytes(), st.len, &file)?;
            progress.add(st.len);
        }
        for (name, digest) in &named {
            writer.add_ref(name, *digest.as_bytes())?;
        }
        writer.finish_signed(sign)
    }
}
