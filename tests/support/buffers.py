"""The buffer protocol seen from C, and where an address is mapped: for the zero-copy tests."""

from __future__ import annotations

import ctypes
from pathlib import Path


class PyBuffer(ctypes.Structure):
    """CPython's `Py_buffer`."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


# Private prototypes: setting argtypes on ctypes.pythonapi's shared function
# objects would change them for every other test module too.
_get_buffer = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p, ctypes.c_int)(
    ("PyObject_GetBuffer", ctypes.pythonapi)
)
_release_buffer = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(("PyBuffer_Release", ctypes.pythonapi))


def get_buffer(obj: object, view: PyBuffer, flags: int) -> int:
    """`PyObject_GetBuffer(obj, view, flags)`; a refusal raises as it would in C (BufferError)."""
    return _get_buffer(obj, ctypes.addressof(view), flags)


def buffer_address(obj: object) -> int:
    """The address of the memory `obj` exports through the buffer protocol."""
    view = PyBuffer()
    assert get_buffer(obj, view, 0) == 0
    try:
        assert view.buf is not None
        return int(view.buf)
    finally:
        _release_buffer(ctypes.addressof(view))


def mapping_of(address: int) -> str:
    """The /proc/self/maps line whose range holds `address`."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        start, end = (int(x, 16) for x in line.split()[0].split("-"))
        if start <= address < end:
            return line
    raise AssertionError(f"{address:#x} is not mapped")


def mapped_file(address: int) -> str:
    """The file mapped at `address` ("" for anonymous memory)."""
    parts = mapping_of(address).split(maxsplit=5)
    return parts[5] if len(parts) == 6 else ""
