"""The torch adapter's boundary: only `precompile._torch` names torch internals,
and the package's modules import each other without cycles."""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "python" / "precompile"

# Private names of other libraries the package uses on purpose: the pure-Python
# pickler and its frame size (stdlib `pickle`), and namedtuple's `_replace`.
_NOT_TORCH = {"_Pickler", "_FRAME_SIZE_TARGET", "_replace"}


def _modules() -> dict[str, ast.Module]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = ast.parse(path.read_text(), str(path))
    return modules


def _outside_adapter(modules: dict[str, ast.Module]) -> dict[str, ast.Module]:
    return {n: t for n, t in modules.items() if not n.startswith("precompile._torch")}


def _own_private_names(modules: dict[str, ast.Module]) -> set[str]:
    """Private names the package outside the adapter defines: its own, not torch's."""
    names = set()
    for tree in modules.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return {n for n in names if n.startswith("_")}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_torch_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "torch" and any(_private(p) for p in parts[1:])


def violations(modules: dict[str, ast.Module]) -> list[str]:
    """Every place outside `precompile._torch` that names a torch internal."""
    outside = _outside_adapter(modules)
    own = _own_private_names(outside)
    found = []
    for module, tree in outside.items():
        # Pieces of f-strings are text, not names (`f"{name}_memo_hit"`); and a
        # `torch._x` string matters where it is imported or looked up (a guard
        # expression's function table quotes torch's names as text).
        fragments = {id(c) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for c in n.values}
        call_args = {id(a) for n in ast.walk(tree) if isinstance(n, ast.Call) for a in n.args}
        for node in ast.walk(tree):
            where = f"{module}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Import):
                found += [f"{where} imports {a.name}" for a in node.names if _private_torch_module(a.name)]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if _private_torch_module(node.module):
                    found.append(f"{where} imports from {node.module}")
                elif node.module.split(".")[0] == "torch":
                    found += [f"{where} imports {node.module}.{a.name}" for a in node.names if _private(a.name)]
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                base = node.value
                if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                    continue
                if node.attr not in own and node.attr not in _NOT_TORCH:
                    found.append(f"{where} reads .{node.attr}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in fragments:
                # getattr(x, "_name"), import_module("torch._x"), or a field name kept as data.
                value = node.value
                if (_private_torch_module(value) and id(node) in call_args) or (
                    value.isidentifier() and _private(value) and value not in own and value not in _NOT_TORCH
                ):
                    found.append(f"{where} names {value!r}")
    return found


def test_only_the_adapter_names_torch_internals() -> None:
    assert violations(_modules()) == []


def test_the_boundary_check_finds_a_private_torch_name() -> None:
    # The check itself must see what it exists to forbid.
    planted = ast.parse(
        "from torch._dynamo.precompile_context import PrecompileContext\n"
        "import torch._inductor.config\n"
        "entries = PrecompileContext._dynamo_cache_entries\n"
        "fn = getattr(package, '_innermost_fn', None)\n"
    )
    modules = _modules()
    modules["precompile.planted"] = planted
    found = [v for v in violations(modules) if v.startswith("precompile.planted:")]
    assert len(found) == 4, found


def _imports(module: str, tree: ast.Module, known: set[str]) -> set[str]:
    """Package modules `module` imports when it is imported (not inside functions
    or under `if TYPE_CHECKING:`)."""
    package = module if module in known and _is_package(module) else module.rpartition(".")[0]
    edges = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            edges |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if target in known:
                edges.add(target)
            edges |= {f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known}
    edges.discard(module)
    return edges


def _is_package(module: str) -> bool:
    return (PACKAGE.parent / module.replace(".", "/") / "__init__.py").exists()


def test_no_import_cycles() -> None:
    modules = _modules()
    known = set(modules)
    graph = {m: _imports(m, t, known) for m, t in modules.items()}
    # A package's __init__ re-exporting its own modules is not a cycle with them.
    for m in graph:
        graph[m] = {d for d in graph[m] if not (_is_package(d) and m.startswith(d + "."))}
    cycles = []
    state: dict[str, int] = {}

    def visit(m: str, stack: list[str]) -> None:
        if state.get(m) == 1:
            cycles.append(stack[stack.index(m) :] + [m])
            return
        if state.get(m) == 2:
            return
        state[m] = 1
        for d in sorted(graph[m]):
            visit(d, [*stack, m])
        state[m] = 2

    for m in sorted(graph):
        visit(m, [])
    assert cycles == []


def test_no_module_is_a_collection() -> None:
    # One concept a file: anything past this many lines is two.
    long = {p.name: n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}
