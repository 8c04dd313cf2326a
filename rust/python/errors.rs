//! The exception classes that derive from two bases: `StoreError` and a
//! built-in (`OSError`, `ValueError`, `LookupError`), so that every failure
//! the store raises is a `StoreError` while `except OSError` or
//! `except FileNotFoundError` around store calls keeps working.
//!
//! `create_exception!` takes a single base, so these are built once with
//! `type(name, bases, namespace)` and added to the module at init.

use std::io;
use std::path::Path;

use pyo3::exceptions::{
    PyFileExistsError, PyFileNotFoundError, PyIsADirectoryError, PyLookupError,
    PyNotADirectoryError, PyOSError, PyPermissionError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

use super::StoreError;

/// The classes, built on first use.
pub(super) struct Classes {
    pub io: Py<PyType>,
    pub not_found: Py<PyType>,
    pub permission: Py<PyType>,
    pub exists: Py<PyType>,
    pub is_a_directory: Py<PyType>,
    pub not_a_directory: Py<PyType>,
    pub invalid_name: Py<PyType>,
    pub invalid_digest: Py<PyType>,
    pub ref_not_found: Py<PyType>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

fn make<'py>(
    py: Python<'py>,
    name: &str,
    bases: &[Bound<'py, PyType>],
    doc: &str,
) -> PyResult<Py<PyType>> {
    let namespace = PyDict::new(py);
    namespace.set_item("__module__", "precompile._core")?;
    namespace.set_item("__doc__", doc)?;
    let bases = PyTuple::new(py, bases)?;
    let ty = py
        .get_type::<PyType>()
        .call1((name, bases, namespace))?
        .cast_into::<PyType>()?;
    Ok(ty.unbind())
}

fn build(py: Python<'_>) -> PyResult<Classes> {
    let store_error = py.get_type::<StoreError>();
    let io = make(
        py,
        "StoreIOError",
        &[store_error.clone(), py.get_type::<PyOSError>()],
        "An operating-system error in the store (disk full, read-only file system, \
         permission denied...); an OSError with errno and filename set.",
    )?;
    let io_sub = |name: &str, base: Bound<'_, PyType>, doc: &str| {
        make(py, name, &[io.bind(py).clone(), base], doc)
    };
    Ok(Classes {
        not_found: io_sub(
            "StoreFileNotFoundError",
            py.get_type::<PyFileNotFoundError>(),
            "A file or directory the store needs does not exist.",
        )?,
        permission: io_sub(
            "StorePermissionError",
            py.get_type::<PyPermissionError>(),
            "The store was refused access to a file (EACCES, EPERM).",
        )?,
        exists: io_sub(
            "StoreFileExistsError",
            py.get_type::<PyFileExistsError>(),
            "A file the store wanted to create already exists.",
        )?,
        is_a_directory: io_sub(
            "StoreIsADirectoryError",
            py.get_type::<PyIsADirectoryError>(),
            "A directory where the store expected a file.",
        )?,
        not_a_directory: io_sub(
            "StoreNotADirectoryError",
            py.get_type::<PyNotADirectoryError>(),
            "A file where the store expected a directory.",
        )?,
        invalid_name: make(
            py,
            "InvalidNameError",
            &[store_error.clone(), py.get_type::<PyValueError>()],
            "A ref name the store refuses (empty, absolute, '..', control characters...).",
        )?,
        invalid_digest: make(
            py,
            "InvalidDigestError",
            &[store_error.clone(), py.get_type::<PyValueError>()],
            "A digest that is not 64 lower-case hex characters.",
        )?,
        ref_not_found: make(
            py,
            "RefNotFoundError",
            &[store_error, py.get_type::<PyLookupError>()],
            "A ref that does not exist where one is required.",
        )?,
        io,
    })
}

/// The classes (built on first call).
pub(super) fn classes(py: Python<'_>) -> &Classes {
    CLASSES.get_or_init(py, || build(py).expect("building the exception classes"))
}

/// Adds the classes to the module.
pub(super) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    let c = classes(py);
    for ty in [
        &c.io,
        &c.not_found,
        &c.permission,
        &c.exists,
        &c.is_a_directory,
        &c.not_a_directory,
        &c.invalid_name,
        &c.invalid_digest,
        &c.ref_not_found,
    ] {
        let ty = ty.bind(py);
        module.add(ty.name()?, ty)?;
    }
    Ok(())
}

/// A `StoreIOError` (the errno-specific subclass where Python has one),
/// with errno, message and filename set the way `open()` sets them.
pub(super) fn os_error(path: &Path, source: &io::Error) -> PyErr {
    use io::ErrorKind as K;
    let errno = source.raw_os_error().or(match source.kind() {
        K::NotFound => Some(libc::ENOENT),
        K::PermissionDenied => Some(libc::EACCES),
        K::AlreadyExists => Some(libc::EEXIST),
        K::IsADirectory => Some(libc::EISDIR),
        K::NotADirectory => Some(libc::ENOTDIR),
        K::InvalidInput => Some(libc::EINVAL),
        K::StorageFull => Some(libc::ENOSPC),
        K::ReadOnlyFilesystem => Some(libc::EROFS),
        _ => Some(libc::EIO),
    });
    let filename = path.display().to_string();
    // io::Error's Display appends " (os error N)"; Python shows "[Errno N]".
    let text = source.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text).to_owned();
    let args = (errno.unwrap_or(libc::EIO), text, filename);
    Python::attach(|py| {
        let c = classes(py);
        let ty = match args.0 {
            libc::ENOENT => &c.not_found,
            libc::EACCES | libc::EPERM => &c.permission,
            libc::EEXIST => &c.exists,
            libc::EISDIR => &c.is_a_directory,
            libc::ENOTDIR => &c.not_a_directory,
            _ => &c.io,
        };
        PyErr::from_type(ty.bind(py).clone(), args)
    })
}

/// Raises the class `pick` chooses with the message `msg`.
pub(super) fn raise(pick: impl Fn(&Classes) -> &Py<PyType>, msg: String) -> PyErr {
    Python::attach(|py| PyErr::from_type(pick(classes(py)).bind(py).clone(), (msg,)))
}
