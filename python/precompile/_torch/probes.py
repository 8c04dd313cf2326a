"""Inductor's CPU ISA probes: which probe libraries a fresh host can be given instead of compiling them."""

from __future__ import annotations

import contextlib
import inspect
import os
import types
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
