"""Kernel templates Inductor compiles at import, made lazy so a warm start compiles none."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from .patch import _Patch


class _LazyTemplate:
    """A jinja template compiled on first use, then used as itself."""

    __slots__ = ("_compile", "_lock", "_template")

    def __init__(self, compile: Callable[[], Any]) -> None:
        self._compile = compile
        self._template: Any = None
        self._lock = threading.Lock()

    def _get(self) -> Any:
        if self._template is None:
            with self._lock:
                if self._template is None:
                    self._template = self._compile()
        return self._template

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)

    def __bool__(self) -> bool:
        return self._get() is not None

    def __repr__(self) -> str:
        return f"<lazy {self._template!r}>" if self._template is not None else "<lazy template, not compiled yet>"


class _LazyKernelTemplates(_Patch):
    """Inductor's kernel templates, compiled when a compile first renders one.

    Importing Inductor's kernel modules builds every Triton template (matmul,
    convolution, flex attention, ...) and compiles each with jinja: tenths of
    a second, paid by a process that only loads stored graphs, which render
    none. While a store is installed, templates built from then on compile on
    first use instead; what they render is the same, so a compile that uses
    them behaves as before.

    Torch versions: 2.11 and newer: every release compiles each template at
    import.
    Steps aside: `_apply` replaces nothing where `KernelTemplate` is missing or
    `_template_from_string` is not a staticmethod.
    """

    def _apply(self) -> None:
        try:
            from torch._inductor.codegen.common import KernelTemplate
        except ImportError:
            return
        original = KernelTemplate.__dict__.get("_template_from_string")
        if not isinstance(original, staticmethod):
            return  # a torch whose templates are built another way
        function = original.__func__

        @functools.wraps(function)
        def _template_from_string(source: str) -> Any:
            return _LazyTemplate(lambda: function(source))

        self._replace(KernelTemplate, "_template_from_string", staticmethod(_template_from_string))


lazy_kernel_templates = _LazyKernelTemplates()
