"""One side of a two-process warm-start test, run as a subprocess.

    python scenario.py NAME compile|load STORE OUT_JSON

`compile` installs precompile, compiles and runs scenario NAME, saves, and
writes outputs and counters; `load` does the same in a fresh process that
should find everything in the store. The parent test compares the two.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time

import torch

import precompile

torch.manual_seed(0)

# Python child processes this process starts (Inductor loads each CPU probe
# library in one on a torch that has no marker saying it loaded).
_PYTHON_CHILDREN: list[list[str]] = []


def _audit(event: str, args: tuple) -> None:
    if event == "subprocess.Popen":
        executable, argv = args[0], args[1]
        argv = [os.fsdecode(a) for a in ([argv] if isinstance(argv, (str, bytes)) else argv)]
        if os.fsdecode(executable or argv[0]) == sys.executable:
            _PYTHON_CHILDREN.append(argv)


sys.addaudithook(_audit)


class MLP(torch.nn.Module):
    def __init__(self, d_in: int = 16, d_hidden: int = 32, d_out: int = 8) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(d_in, d_hidden)
        self.l2 = torch.nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.l2(torch.relu(self.l1(x)))).sum(-1)


def inference():
    model = MLP()
    fn = torch.compile(model)
    with torch.no_grad():
        return [fn(torch.randn(4, 16))]


def training():
    model = MLP()
    fn = torch.compile(model)
    x = torch.randn(4, 16)
    out = fn(x)
    out.sum().backward()
    return [out.detach(), model.l1.weight.grad, model.l2.bias.grad]


def _with_break(x: torch.Tensor) -> torch.Tensor:
    y = torch.sin(x) * 2
    torch._dynamo.graph_break()
    return torch.cos(y) + 1


def graph_break():
    fn = torch.compile(_with_break)
    return [fn(torch.randn(8, 8))]


def _logged_then_break(x: torch.Tensor) -> torch.Tensor:
    # As torchvision's ops start: a graph whose one call is no tensor op.
    torch._C._log_api_usage_once("precompile.test.op_free")
    torch._dynamo.graph_break()
    return x + 1


def op_free_graph():
    fn = torch.compile(_logged_then_break)
    return [fn(torch.arange(4.0))]


def _checked_then_break(x: torch.Tensor) -> torch.Tensor:
    # Under dynamic shapes the check traces `size` and a comparison, and
    # nothing reads them: the graph before the break runs and returns nothing.
    if x.shape[-1] > 2:
        torch._dynamo.graph_break()
    return x * 2


def unused_shape_check():
    fn = torch.compile(_checked_then_break, dynamic=True)
    return [fn(torch.arange(float(n))) for n in (3, 5)]


def _per_shape(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * 3 + 1


def recompile_limit():
    # Static shapes and a limit of 2: the compiling process compiles the
    # first two shapes and runs the other two eagerly, past the limit.
    torch._dynamo.config.recompile_limit = 2
    fn = torch.compile(_per_shape, dynamic=False)
    return [fn(torch.randn(n, 3)) for n in (2, 3, 4, 5)]


def _scale(x: torch.Tensor) -> torch.Tensor:
    return (x * 3 + 1).relu().sum(0)


def dynamic():
    fn = torch.compile(_scale)
    return [fn(torch.randn(n, 4)) for n in (2, 3, 5, 9)]


def _shared_a(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * x + 1


def _shared_b(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x) * x + 1


def shared():
    a, b = torch.compile(_shared_a), torch.compile(_shared_b)
    x = torch.randn(16, 16)
    return [a(x), b(x)]


def forward_only():
    # A training graph whose backward never runs: the save compiles the
    # backward (with `pending_backwards` off, its backend is never recorded,
    # which the save must report).
    model = MLP()
    fn = torch.compile(model)
    return [fn(torch.randn(4, 16)).detach()]


class Block(torch.nn.Module):
    """One transformer-style block: attention-free, but the same layers."""

    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 2 * d)
        self.down = torch.nn.Linear(2 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Breaky(torch.nn.Module):
    """Its forward comes from `_unrolled_module`."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(n))


def _unrolled_module(n: int, directory: str) -> type[torch.nn.Module]:
    """A model of N identical blocks called one by one, with a graph break
    after each, as a large model with an unsupported op between its layers
    compiles: every block after a break starts a new frame and a new graph.

    It lives in a real file beside the store, so both processes see the same
    source (Dynamo keys and checks entries by it).
    """
    import importlib

    name = f"breaky_{n}"
    path = os.path.join(directory, name + ".py")
    lines = ["import torch", "", "", "def forward(self, x):"]
    for i in range(n):
        lines += [f"    x = self.blocks[{i}](x)", "    torch._dynamo.graph_break()"]
    lines += ["    return x", ""]
    text = "\n".join(lines)
    if not os.path.exists(path) or pathlib.Path(path).read_text() != text:
        with open(path, "w") as f:
            f.write(text)
    sys.path.insert(0, directory)
    Breaky.forward = importlib.import_module(name).forward  # type: ignore[method-assign]
    return Breaky


def _breaks(device: str) -> list[torch.Tensor]:
    n = int(os.environ.get("PRECOMPILE_TEST_BLOCKS", "16"))
    model = _unrolled_module(n, os.path.dirname(os.path.abspath(sys.argv[3])))(n).to(device)
    fn = torch.compile(model)
    with torch.no_grad():
        return [fn(torch.randn(4, 8, 32, device=device)).cpu()]


def breaks():
    return _breaks("cpu")


def cuda_breaks():
    return _breaks("cuda")


def cuda_transformer():
    layer = torch.nn.TransformerEncoderLayer(64, 4, 256, batch_first=True, dropout=0.0)
    # Train mode (dropout 0) keeps the fused inference op out, so Inductor
    # generates Triton kernels for the layers.
    model = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).cuda().train()
    fn = torch.compile(model)
    with torch.no_grad():
        out = fn(torch.randn(4, 16, 64, device="cuda"))
    return [out.cpu()]


def cuda_shared():
    a, b = torch.compile(_shared_a), torch.compile(_shared_b)
    x = torch.randn(64, 64, device="cuda")
    return [a(x).cpu(), b(x).cpu()]


def _gpu_then_cpu(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = (x.sin() * 2).relu()
    torch._dynamo.graph_break()
    # The resume frame's graph only touches CPU tensors.
    return y, torch.arange(8.0) * 3


def cuda_then_cpu():
    y, z = torch.compile(_gpu_then_cpu)(torch.randn(256, device="cuda"))
    return [y.cpu(), z]


def _reductions(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.softmax(x, -1), y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)


def cuda_reductions():
    # Reductions this long come with several candidate configs: the first
    # run benchmarks them and keeps the winner.
    x = torch.randn(256, 32768, device="cuda")
    y = torch.randn(1024, 4096, device="cuda")
    return [o.cpu() for o in torch.compile(_reductions)(x, y)]


def _scaled(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.softmax(x, -1), torch.nn.functional.gelu(y) * 2 + 1, y.sum(0)


def cuda_coordesc():
    # Coordinate descent (on under max-autotune) tunes each kernel's launch
    # config at its first launch, after the graph's bundle was collected:
    # a reduction with several candidates, a pointwise kernel with one.
    x = torch.randn(256, 32768, device="cuda")
    y = torch.randn(2048, 4096, device="cuda")
    fn = torch.compile(_scaled, options={"coordinate_descent_tuning": True})
    return [o.cpu() for o in fn(x, y)]


SCENARIOS = {
    "breaks": breaks,
    "cuda_then_cpu": cuda_then_cpu,
    "cuda_breaks": cuda_breaks,
    "cuda_coordesc": cuda_coordesc,
    "cuda_reductions": cuda_reductions,
    "cuda_shared": cuda_shared,
    "cuda_transformer": cuda_transformer,
    "forward_only": forward_only,
    "inference": inference,
    "training": training,
    "graph_break": graph_break,
    "op_free_graph": op_free_graph,
    "unused_shape_check": unused_shape_check,
    "recompile_limit": recompile_limit,
    "dynamic": dynamic,
    "shared": shared,
}


def _child_processes() -> int:
    """Live child processes of this one (Inductor's compile pool is one)."""
    count = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                # The command name (field 2) may hold spaces; ppid follows it.
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        count += ppid == os.getpid()
    return count


def _torch_key_computed() -> bool:
    """Whether this process computed (or was handed) torch's install hash:
    its cache refuses a second value once it holds one. Run last, since an
    accepted probe value would stand in for the real one."""
    from torch._inductor import codecache

    try:
        codecache.torch_key.set(b"\0" * 32)
    except (AssertionError, RuntimeError):
        return True
    codecache.torch_key.clear()
    return False


def main() -> None:
    name, mode, store, out_path = sys.argv[1:5]
    from torch._dynamo.utils import counters

    # Read-only layers (bundle files or store dirs) under the store, if any.
    layers = [p for p in os.environ.get("PRECOMPILE_TEST_LAYERS", "").split(os.pathsep) if p]
    # Public keys (or key files), comma-separated, that a bundle layer must be signed by.
    trusted = [k for k in os.environ.get("PRECOMPILE_TEST_TRUSTED_KEYS", "").split(",") if k]
    # "compile-at-exit" relies on install()'s save at interpreter exit.
    # Unsigned bundle layers are accepted only by explicit opt-in.
    allow = True if layers and not trusted else None
    precompile.install(
        store,
        layers=layers,
        save_on_exit=mode == "compile-at-exit",
        trusted_keys=trusted or None,
        allow_unsigned=allow,
    )
    mega_in = os.environ.get("PRECOMPILE_TEST_MEGA_IN")
    if mega_in:
        # Mega-Cache: artifacts another process saved with
        # torch.compiler.save_cache_artifacts() populate this store.
        with open(mega_in, "rb") as f:
            torch.compiler.load_cache_artifacts(f.read())
    stance = os.environ.get("PRECOMPILE_TEST_STANCE") if mode == "load" else None
    start = time.perf_counter()
    if stance:
        # "fail_on_recompile": a frame the store does not serve raises.
        with torch.compiler.set_stance(stance):
            outputs = SCENARIOS[name]()
    else:
        outputs = SCENARIOS[name]()
    elapsed = time.perf_counter() - start
    report = None
    if mode == "compile":
        mega_out = os.environ.get("PRECOMPILE_TEST_MEGA_OUT")
        if mega_out:
            saved = torch.compiler.save_cache_artifacts()
            assert saved is not None
            with open(mega_out, "wb") as f:
                f.write(saved[0])
        r = precompile.save()
        report = {
            "entries": r.entries,
            "backends": r.backends,
            "unique_backends": r.unique_backends,
            "missing_backends": r.missing_backends,
        }
    torch.save([o.detach() for o in outputs], out_path + ".pt")
    with open(out_path, "w") as f:
        json.dump(
            {
                "seconds": elapsed,
                "frames": torch._dynamo.convert_frame.FRAME_COUNTER,
                "counters": {k: dict(v) for k, v in counters.items()},
                "report": report,
                "child_processes": _child_processes(),
                "python_children": _PYTHON_CHILDREN,
                "torch_key_computed": _torch_key_computed(),
            },
            f,
        )


if __name__ == "__main__":
    main()
