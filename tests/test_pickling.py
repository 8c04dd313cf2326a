"""Deterministic pickling and GraphModule serialization."""

from __future__ import annotations

import pickle
import textwrap

import pytest
from support.processes import last_line, run_python

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

from precompile import graph, pickling  # noqa: E402


@pytest.mark.parametrize(
    "tensor",
    [
        torch.arange(12, dtype=torch.float32).reshape(3, 4),
        torch.arange(12, dtype=torch.float32).reshape(3, 4).t(),  # non-contiguous
        torch.randn(5).to(torch.bfloat16),
        torch.tensor([True, False]),
        torch.empty(0, 3, dtype=torch.int64),
        torch.tensor(7, dtype=torch.int8),
    ],
)
def test_tensor_round_trip(tensor: torch.Tensor) -> None:
    out = pickling.decode_tensor(pickling.encode_tensor(tensor))
    assert out.dtype == tensor.dtype
    assert out.shape == tensor.shape
    assert out.stride() == tensor.stride()
    torch.testing.assert_close(out, tensor, rtol=0, atol=0)


def test_parameters_and_grad_flags_survive() -> None:
    p = torch.nn.Parameter(torch.randn(2, 2))
    out = pickling.decode_tensor(pickling.encode_tensor(p))
    assert isinstance(out, torch.nn.Parameter) and out.requires_grad
    meta = pickling.decode_tensor(pickling.encode_tensor(torch.empty(3, 4, device="meta")))
    assert meta.device.type == "meta" and meta.shape == (3, 4)


def test_tensors_leave_the_pickle_and_shared_tensors_stay_shared() -> None:
    t = torch.randn(4)
    record, tensors = pickling.dumps({"a": t, "b": t, "c": [1, 2]})
    assert len(tensors) == 1
    back = pickling.loads(record, tensors)
    assert back["a"] is back["b"]
    torch.testing.assert_close(back["a"], t)


def test_corrupt_persistent_ids_are_refused() -> None:
    record, tensors = pickling.dumps([torch.ones(1)])
    with pytest.raises(Exception, match="out of range"):
        pickling.loads(record, [])


_HASHSEED_PROGRAM = textwrap.dedent(
    """
    import sys, hashlib, torch
    from precompile import pickling, graph

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.arange(4.0))
            self.tags = {"alpha", "beta", "gamma", "delta", "epsilon"}
            self.lin = torch.nn.Linear(4, 4)
            torch.nn.init.constant_(self.lin.weight, 0.5)
            torch.nn.init.constant_(self.lin.bias, 0.25)
        def forward(self, x):
            return torch.relu(self.lin(x) * self.scale)

    gm = torch.fx.symbolic_trace(M())
    record, tensors = graph.serialize_graph_module(gm)
    obj_record, _ = pickling.dumps({"names": {"x", "y", "z", "w", "v"}, "frozen": frozenset("abcdef")})
    h = hashlib.sha256(record + b"".join(tensors) + obj_record).hexdigest()
    print(h)
    """
)


def _digest_with_seed(seed: str) -> str:
    env = {**__import__("os").environ, "PYTHONHASHSEED": seed}
    proc = run_python("-W", "ignore", "-c", _HASHSEED_PROGRAM, env=env, timeout=300)
    return last_line(proc.stdout)


def test_equal_graphs_give_equal_bytes_across_processes() -> None:
    # Different hash seeds reorder sets; the encoding must not change.
    assert _digest_with_seed("1") == _digest_with_seed("2") == _digest_with_seed("12345")


def test_graph_module_round_trip() -> None:
    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("offset", torch.tensor([1.0, 2.0, 3.0]))

        # No annotations: under `from __future__ import annotations` they are
        # strings, which torch 2.11's GraphModule.__reduce__ cannot name
        # (plain pickle.dumps of such a module fails there too).
        def forward(self, x):
            return torch.sin(x) + self.offset

    gm = torch.fx.symbolic_trace(M())
    x = torch.randn(3)
    expected = gm(x)
    record, tensors = graph.serialize_graph_module(gm)
    again, _ = graph.serialize_graph_module(torch.fx.symbolic_trace(M()))
    assert record == again
    rebuilt = graph.deserialize_graph_module(record, tensors)
    assert isinstance(rebuilt, torch.fx.GraphModule)
    torch.testing.assert_close(rebuilt(x), expected)


def test_foreign_records_are_refused() -> None:
    record, tensors = pickling.dumps(("something-else", None, None))
    with pytest.raises(ValueError, match="not a serialized graph module"):
        graph.deserialize_graph_module(record, tensors)


def test_bytes_do_not_depend_on_object_identity() -> None:
    # The same values, once sharing string objects and once not.
    shared = "kernel_name"
    a = {"fn": shared, "name": shared, "blob": b"xyz" * 3}
    b = {"fn": "".join(["kernel", "_name"]), "name": "".join(["kernel_", "name"]), "blob": b"xyz" * 3}
    assert a["fn"] is a["name"] and b["fn"] is not b["name"]
    assert pickling.dumps(a)[0] == pickling.dumps(b)[0]
    assert pickling.loads(pickling.dumps(b)[0]) == a
    big = "x" * (1 << 17)
    assert pickling.loads(*pickling.dumps([big, big.encode()])) == [big, big.encode()]


def test_short_texts_repeat_as_back_references() -> None:
    words = ["token_" + str(i % 7) for i in range(500)]
    copies = ["".join(["token_", str(i % 7)]) for i in range(500)]
    record, _ = pickling.dumps(words)
    assert record == pickling.dumps(copies)[0]
    assert len(record) < 500 * 4
    assert pickling.loads(record) == words


def test_equal_long_texts_are_written_once() -> None:
    text = "def f():\n    return 1\n" * 5000
    copies = [text[:], "".join([text[: len(text) // 2], text[len(text) // 2 :]])]
    assert copies[0] is text and copies[1] is not text
    record, parts = pickling.dumps({"a": copies[0], "b": copies[1], "c": text.encode(), "d": bytes(text.encode())})
    # Long texts leave the pickle as parts, one per distinct value.
    assert len(parts) == 2 and len(record) < 1024
    back = pickling.loads(record, parts)
    assert back["a"] == back["b"] == text and back["c"] == back["d"] == text.encode()


def _nop_maker():  # type: ignore[no-untyped-def]
    return lambda: None


def test_a_closure_free_local_function_pickles_by_value() -> None:
    # Dynamo's generated bytecode holds such a function as a constant.
    fn = _nop_maker()
    data, parts = pickling.dumps({"const": (1, fn)})
    back = pickling.loads(data, parts)["const"][1]
    assert back is not fn
    assert back() is None
    assert back.__qualname__ == fn.__qualname__
    assert back.__globals__ is fn.__globals__
    assert pickling.dumps({"const": (1, fn)})[0] == data


def test_a_local_function_with_a_closure_is_refused() -> None:
    captured = torch.ones(1)
    with pytest.raises(pickle.PicklingError):
        pickling.dumps(lambda: captured)


_DEFERRED_PROGRAM = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[1])
    from precompile import pickling
    data = bytes.fromhex(sys.argv[2])
    pickling.DEFERRED_GLOBALS = frozenset({("slow_module", "add_one")})
    obj = pickling.loads(data)
    stand_in = obj["fn"]
    print(type(stand_in).__name__, "slow_module" in sys.modules)
    import copy  # torch deep-copies a loaded graph's entry
    print(copy.deepcopy(obj)["fn"] is stand_in, "slow_module" in sys.modules)
    # Written as the real function, before and after the module is imported.
    print(pickling.dumps(obj)[0] == data, "slow_module" in sys.modules)
    print(stand_in(41), "slow_module" in sys.modules)
    print(type(pickling.loads(data)["fn"]).__name__)
    """
)


def test_a_deferred_global_imports_its_module_on_first_call(tmp_path: pytest.TempPathFactory) -> None:
    (tmp_path / "slow_module.py").write_text("def add_one(x):\n    return x + 1\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        import slow_module

        data, parts = pickling.dumps({"fn": slow_module.add_one})
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("slow_module", None)
    assert not parts
    proc = run_python("-c", _DEFERRED_PROGRAM, tmp_path, data.hex(), timeout=300)
    assert proc.stdout.split("\n")[:5] == [
        "DeferredGlobal False",
        "True False",
        "True True",
        "42 True",
        "function",  # the module is imported now: the real function
    ]


def test_a_global_not_named_deferred_imports_as_pickle_does() -> None:
    import colorsys

    data, _ = pickling.dumps({"fn": colorsys.rgb_to_hsv})
    assert pickling.loads(data)["fn"] is colorsys.rgb_to_hsv
