"""Inductor's CPU ISA probes: which probe libraries a fresh host can be given instead of compiling them."""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import sys
import types
from collections.abc import Callable
from typing import Any

from .patch import _Patch


def _isa_probe_sources() -> tuple[str, ...]:
    """The programs Inductor compiles to probe the CPU: the vector ISA probe
    and the feature probes (AVX-512 BF16 and VNNI, AMX) that
    `cpu_vec_isa`'s classes hold as `*_code` strings."""
    try:
        from torch._inductor import cpu_vec_isa
    except ImportError:
        return ()
    base = getattr(cpu_vec_isa, "VecISA", None)
    if not isinstance(base, type):
        return ()
    found: set[str] = set()
    for cls in vars(cpu_vec_isa).values():
        if isinstance(cls, type) and issubclass(cls, base):
            for klass in cls.__mro__:
                for name, value in vars(klass).items():
                    if name.endswith("_code") and isinstance(value, str) and value.strip():
                        found.add(value)
    return tuple(sorted(found))


def isa_probe_libraries(cache_dir: str) -> list[tuple[str, bool]]:
    """The CPU instruction-set probe libraries Inductor built in `cache_dir`,
    each with whether it is known to have loaded.

    Inductor picks a vector ISA among those the CPU reports (cpuid) by
    compiling a tiny probe library per candidate and loading it in a child
    process, and probes CPU features (AVX-512 BF16 and VNNI, AMX) the same
    way. The probe's cache key covers the compiler version, the ISA flags
    and the torch version, so a machine that finds the same key would build
    the same probe: shipping it spares that machine the compiler runs
    (seconds each). A probe that loaded carries a `.load_ok` marker where
    torch marks them (newer torch; on older torch `probe_load_marks` does
    while a store is installed), and a marked probe skips the child process.
    Where torch marks probes itself, only marked ones are listed: an
    unmarked one failed to load here. Elsewhere a probe is recognized by its
    source beside it (one of torch's probe programs) and listed, loaded or
    not; the loading machine loads an unloaded one in a child process. No
    other library has a marker or a probe's source.
    """
    sources = () if TORCH_MARKS_PROBES else _isa_probe_sources()
    found: list[tuple[str, bool]] = []
    try:
        subdirs = os.scandir(cache_dir)
    except FileNotFoundError:
        return []
    with subdirs:
        for sub in subdirs:
            if not sub.is_dir() or len(sub.name) != 2:
                continue
            with os.scandir(sub.path) as files:
                for f in files:
                    if not f.name.endswith(".so") or not f.is_file(follow_symlinks=False):
                        continue
                    loaded = os.path.isfile(f.path + ".load_ok")
                    probe = loaded if TORCH_MARKS_PROBES else _is_probe(f.path, sources)
                    if probe:
                        found.append((f.path, loaded))
    return sorted(found)


def _mentions(code: types.CodeType, literal: str) -> bool:
    return any(c == literal or (isinstance(c, types.CodeType) and _mentions(c, literal)) for c in code.co_consts)


def _torch_itself_marks_probes() -> bool:
    # Looked for in torch's own probe code: 2.13 already loads probes
    # through `VecISA._probe_load` but leaves no marker, so the method's
    # presence says nothing.
    try:
        from torch._inductor.cpu_vec_isa import VecISA
    except ImportError:
        return False
    for value in vars(VecISA).values():
        code = getattr(inspect.unwrap(getattr(value, "__func__", value)), "__code__", None)
        if isinstance(code, types.CodeType) and _mentions(code, ".load_ok"):
            return True
    return False


TORCH_MARKS_PROBES = _torch_itself_marks_probes()


def torch_marks_loaded_probes() -> bool:
    """Whether Inductor leaves `.load_ok` beside a probe that loaded and
    trusts it later: the versions that load a probe through
    `VecISA._probe_load` do; on older ones, `probe_load_marks` teaches it
    while a store is installed."""
    return TORCH_MARKS_PROBES or probe_load_marks.active


class _ProbeLoadCheck:
    """Stands in for the `subprocess` module inside torch's `cpu_vec_isa`.

    Everything is the real module's, except that `check_call` (torch 2.11)
    or `run` (2.13) of torch's probe-load program (`VecISA._avx_py_load`
    with a library path put in) trusts a `.load_ok` marker beside that
    library, and leaves one when the child process loaded it. Any other
    command runs as it would.
    """

    def __init__(self, module: Any, template: str) -> None:
        self._module = module
        self._head, _, self._tail = template.partition("__lib_path__")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def _probe(self, args: Any) -> str | None:
        if not isinstance(args, (list, tuple)) or len(args) != 3 or args[1] != "-c":
            return None
        program = args[2]
        if not isinstance(program, str) or len(program) <= len(self._head) + len(self._tail):
            return None
        if not (program.startswith(self._head) and program.endswith(self._tail)):
            return None
        path = program[len(self._head) : len(program) - len(self._tail)]
        return path if os.path.isabs(path) and "\n" not in path and '"' not in path else None

    def check_call(self, args: Any, *rest: Any, **kwargs: Any) -> Any:
        library = self._probe(args)
        if library is None:
            return self._module.check_call(args, *rest, **kwargs)
        if os.path.isfile(library + ".load_ok"):
            return 0
        code = self._module.check_call(args, *rest, **kwargs)  # raises unless it loaded
        _mark_loaded(library)
        return code

    def run(self, args: Any, *rest: Any, **kwargs: Any) -> Any:
        library = self._probe(args)
        if library is None:
            return self._module.run(args, *rest, **kwargs)
        if os.path.isfile(library + ".load_ok"):
            return self._module.CompletedProcess(args, 0)
        done = self._module.run(args, *rest, **kwargs)  # check=True raises unless it loaded
        if done.returncode == 0:
            _mark_loaded(library)
        return done


def _mark_loaded(library: str) -> None:
    with contextlib.suppress(OSError), open(library + ".load_ok", "w"):
        pass


class _ProbeLoadMarks(_Patch):
    """Probes that loaded once are not loaded in a child process again.

    Inductor checks each vector-ISA and CPU-feature probe library it built
    by loading it in a child Python process that imports torch, seconds on
    every process start, warm caches or not. Newer torch leaves a
    `.load_ok` marker beside a probe that loaded and trusts it from then
    on. On a torch that does not (2.11, 2.13), the same marker protocol holds
    while a store is installed: the verdict is torch's own child process,
    recorded once, and the store ships it with the probe (FORMAT §3.3
    `isa_loaded`), as it does on newer torch. A probe without a marker is
    loaded in the child process as before; one that fails gets none.

    Torch versions: 2.11 and 2.13, whose Inductor leaves no `.load_ok` marker;
    newer torch marks probes itself.
    Steps aside: `_apply` replaces nothing where torch's own probe code mentions
    `.load_ok` (`TORCH_MARKS_PROBES`), or where it loads probes through another
    program or module than `VecISA._avx_py_load` run by `subprocess`.
    """

    def _apply(self) -> None:
        import subprocess

        try:
            from torch._inductor import cpu_vec_isa
        except ImportError:
            return
        base = getattr(cpu_vec_isa, "VecISA", None)
        template = getattr(base, "_avx_py_load", None)
        if (
            TORCH_MARKS_PROBES
            or not isinstance(template, str)
            or template.count("__lib_path__") != 1
            or vars(cpu_vec_isa).get("subprocess") is not subprocess
        ):
            return  # torch marks probes itself, or loads them a way we do not know
        self._replace(cpu_vec_isa, "subprocess", _ProbeLoadCheck(subprocess, template))


probe_load_marks = _ProbeLoadMarks()


def _is_probe(library: str, sources: tuple[str, ...]) -> bool:
    if not sources:
        return False
    source = library[: -len(".so")] + ".cpp"
    longest = max(len(s) for s in sources)
    try:
        with open(source, encoding="utf-8") as f:
            return f.read(longest + 1) in sources
    except (OSError, UnicodeDecodeError):
        return False


class _MarkedProbeLookup(_Patch):
    """A CPU probe that built and loaded once is found without building Inductor's C++ options.

    `VecISA.check_build` takes the probe's key and source path from
    `codecache.write`, then builds a `CppTorchOptions` (which imports
    `torch.utils.cpp_extension`, and setuptools with it, and lists include
    paths) only to name the library it looks for: `<key>.so` beside the
    source (`CppBuilder`'s target, `output_dir/name.ext`). A served CPU
    start runs ten of these checks (vector ISAs, CPU features) before its
    first C++ kernel loads: about 0.1 s of a 2-core host's start. While
    installed, a check whose library exists with a `.load_ok` marker that
    this process trusts (`torch_marks_loaded_probes()`) answers True, as
    torch would find it built and loaded; anything else (no library, no
    marker, markers not trusted) runs torch's `check_build`.

    Torch versions: 2.11 and newer (where `check_build` names its library
    from `write(code, "cpp", extra=...)`'s key beside the source).
    Steps aside: `_apply` replaces nothing where `check_build`'s source
    does not derive the library that way, where the ISA's build flags or
    the fingerprint helper are missing, or off Linux (`.so`).
    """

    # While active: the probe library `check_build` looks for, for (isa, code).
    library: Callable[[Any, str], str] | None = None

    def _apply(self) -> None:
        if not sys.platform.startswith("linux"):
            return
        try:
            from torch._inductor import codecache, cpu_vec_isa
        except ImportError:
            return
        base = getattr(cpu_vec_isa, "VecISA", None)
        original = None if base is None else vars(base).get("check_build")
        fingerprint = getattr(cpu_vec_isa, "_get_isa_dry_compile_fingerprint", None)
        write = getattr(codecache, "write", None)
        if not callable(original) or not callable(fingerprint) or not callable(write):
            return
        flags = _arch_flags_reader(original)
        if flags is None:
            return

        def library(isa: Any, code: str) -> str:
            key, source = write(code, "cpp", extra=fingerprint(flags(isa)))
            return os.path.join(os.path.dirname(source), f"{key}.so")

        @functools.wraps(original)
        def check_build(isa: Any, code: str) -> Any:
            if torch_marks_loaded_probes():
                path = library(isa, code)
                if os.path.isfile(path) and os.path.isfile(path + ".load_ok"):
                    return True
            return original(isa, code)

        self.library = library
        self._replace(base, "check_build", check_build)

    def _stopped(self) -> None:
        self.library = None


# The statements of `check_build` that name its library, whitespace removed:
# the key and source from `write` with the ISA's fingerprint, the source's
# directory as the output dir, and a `CppBuilder` of that key and source.
_NAMING = (
    'key,input_path=write(code,"cpp",extra=_get_isa_dry_compile_fingerprint(',
    "output_dir=os.path.dirname(input_path)",
    "CppBuilder(key,[input_path],",
    "get_target_file_path()",
)


def _arch_flags_reader(check_build: Any) -> Any:
    """How `check_build` reads an ISA's build flags for its fingerprint (a
    method on newer torch, the attribute on 2.11), where its source names its
    library as `_NAMING` says; else None."""
    try:
        source = re.sub(r"\s+", "", inspect.getsource(check_build))
    except (OSError, TypeError):
        return None
    if not all(part in source for part in _NAMING):
        return None
    if "_get_isa_dry_compile_fingerprint(self.build_arch_flags())" in source:
        return lambda isa: isa.build_arch_flags()
    if "_get_isa_dry_compile_fingerprint(self._arch_flags)" in source:
        return lambda isa: isa._arch_flags
    return None


marked_probe_lookup = _MarkedProbeLookup()
