//! Buffers in and out: reading any Python buffer without copying, and `Blob`, which
//! exports a stored object's mapping read-only through the buffer protocol.

use std::ffi::{c_int, c_void};

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyMemoryView};

use super::GIL_RELEASE_MIN;
use crate::base::Blob;
use crate::hash::hash_bytes;

/// Whether the memory behind `obj` can never change: `bytes`, our own
/// `Blob`s, and memoryviews of those. Anything else (bytearray, numpy
/// arrays, mmap...) may be written to by another thread while we work.
fn is_immutable(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if obj.is_exact_instance_of::<PyBytes>() || obj.is_instance_of::<PyBlob>() {
        return Ok(true);
    }
    if let Ok(view) = obj.cast::<PyMemoryView>() {
        let base = view.getattr("obj")?;
        return Ok(base.is_exact_instance_of::<PyBytes>() || base.is_instance_of::<PyBlob>());
    }
    Ok(false)
}

/// Runs `f` on the bytes of any C-contiguous buffer, without copying them.
/// The buffer is released before returning, even on error, so a bytearray
/// can be resized again as soon as the call is over.
pub(super) fn with_buffer<T>(
    data: &Bound<'_, PyAny>,
    f: impl FnOnce(&[u8], bool) -> PyResult<T>,
) -> PyResult<T> {
    let py = data.py();
    let buffer = PyUntypedBuffer::get(data)?;
    let result = (|| {
        if !buffer.is_c_contiguous() {
            return Err(PyBufferError::new_err("expected a C-contiguous buffer"));
        }
        let len = buffer.len_bytes();
        let bytes: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: `buffer` holds a successful PyObject_GetBuffer export
            // of `len` contiguous bytes at `buf_ptr`, and stays alive (it is
            // released only below) for as long as `bytes` is used, GIL or no
            // GIL: the exporter must keep the memory valid and in place until
            // the export is released; a bytearray refuses to resize while
            // exported. What an export does not stop is another thread
            // *writing* the bytes; callers handle that (see `is_immutable`).
            unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, len) }
        };
        f(bytes, is_immutable(data)?)
    })();
    buffer.release(py);
    result
}

/// Hashes any buffer with blake3 and returns the lower-case hex digest.
/// Large inputs hash on all cores, without the GIL.
#[pyfunction]
pub(super) fn blake3_hex(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<String> {
    with_buffer(data, |bytes, _| {
        Ok(if bytes.len() < GIL_RELEASE_MIN {
            hash_bytes(bytes).to_hex()
        } else {
            py.detach(|| hash_bytes(bytes).to_hex())
        })
    })
}

/// The bytes of one stored object, memory-mapped read-only.
///
/// Supports the buffer protocol: `memoryview(blob)` copies nothing, and
/// `bytes(blob)` copies only when asked. The mapping stays valid even if the
/// object's file is removed.
#[pyclass(frozen, module = "precompile._core", name = "Blob")]
pub struct PyBlob {
    pub(super) blob: Blob,
}

#[pymethods]
impl PyBlob {
    /// The object's blake3 digest, lower-case hex.
    #[getter]
    fn digest(&self) -> String {
        self.blob.digest().to_hex()
    }

    fn __len__(&self) -> usize {
        self.blob.len()
    }

    fn __bytes__<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.blob)
    }

    fn __repr__(&self) -> String {
        format!(
            "Blob(digest='{}', len={})",
            self.blob.digest(),
            self.blob.len()
        )
    }

    /// Exports the mapping read-only.
    ///
    /// # Safety
    /// Called by CPython with a valid `view`.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("null Py_buffer"));
        }
        let bytes = slf.get().blob.as_bytes();
        // The empty blob has no mapping; a buffer still needs a valid pointer.
        static EMPTY: [u8; 1] = [0];
        let ptr = if bytes.is_empty() {
            EMPTY.as_ptr()
        } else {
            bytes.as_ptr()
        };
        // SAFETY: `view` is valid (CPython's contract). PyBuffer_FillInfo
        // takes a new reference to the Blob in `view.obj`, which keeps the
        // Blob, and so its Arc<Mmap>, alive until the view is released; the
        // mapping never moves. readonly=1 makes it refuse PyBUF_WRITABLE, and
        // nothing ever writes through the pointer.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                ptr as *mut c_void,
                bytes.len() as ffi::Py_ssize_t,
                1,
                flags,
            )
        };
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    /// Nothing to free: the format string is static and `view.obj`'s
    /// reference is dropped by CPython.
    ///
    /// # Safety
    /// Called by CPython with the view `__getbuffer__` filled.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
