"""Small real models from torchvision and transformers, as a user compiles them.

Random weights from tiny configs (no model hub), CPU-sized. Each corpus entry
builds its model and inputs, then returns the calls a user would make: compile
with plain `torch.compile`, then inference over two or more input shapes, or one
training step. `build(name)` keeps the two apart, so a bench times the calls
alone; `run(name)` does both and returns the outputs, which must be identical
across processes.

Shared by the warm-start tests (tests/programs/corpus_run.py) and
benches/warm_start.py (`--models resnet18,gpt2,...`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["MODELS", "available", "build", "missing_reason", "run"]

# Compiles the built model and makes its first calls; returns their outputs.
Calls = Callable[[], list[torch.Tensor]]

# What the models are compiled with; the warm-start bench swaps in the
# identity to time eager PyTorch on the same calls.
compile_fn: Callable[[torch.nn.Module], Callable] = torch.compile
# Where models and inputs live; the bench sets "cuda" for its GPU runs.
device = "cpu"


def _vision(name: str) -> torch.nn.Module:
    import torchvision.models as tvm

    return getattr(tvm, name)(weights=None).eval().to(device)


def _infer(model: torch.nn.Module, inputs: list[dict]) -> Calls:
    def calls() -> list[torch.Tensor]:
        fn = compile_fn(model)
        with torch.no_grad():
            return [_first_tensor(fn(**kwargs)) for kwargs in inputs]

    return calls


def _first_tensor(out: object) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict) or hasattr(out, "to_tuple"):
        out = out.to_tuple() if hasattr(out, "to_tuple") else tuple(out.values())
    return next(o for o in out if isinstance(o, torch.Tensor))  # type: ignore[union-attr]


def resnet18() -> Calls:
    return _infer(_vision("resnet18"), [{"x": torch.randn(1, 3, 64, 64, device=device)}])


def mobilenet_v3_small() -> Calls:
    # Two batch sizes: the second call makes Dynamo recompile with a dynamic
    # batch dimension, an entry with two guarded codes.
    model = _vision("mobilenet_v3_small")
    return _infer(model, [{"x": torch.randn(b, 3, 64, 64, device=device)} for b in (1, 2)])


def _ids(vocab: int, batch: int, length: int) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), device=device)


def gpt2() -> Calls:
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=64, vocab_size=512)
    model = GPT2Model(config).eval().to(device)
    return _infer(model, [{"input_ids": _ids(512, 1, n)} for n in (8, 12)])


def _decoder(config_name: str, model_name: str, lengths: tuple[int, ...], **extra: object) -> Calls:
    """A 2-layer decoder of a Llama-style family (rotary embeddings, grouped-query
    attention, RMSNorm), one input per sequence length."""
    import transformers

    config = getattr(transformers, config_name)(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=64,
        **extra,
    )
    model = getattr(transformers, model_name)(config).eval().to(device)
    return _infer(model, [{"input_ids": _ids(256, 1, n)} for n in lengths])


def llama() -> Calls:
    # The second length makes Dynamo recompile with a dynamic length, the
    # third runs that dynamic graph.
    return _decoder("LlamaConfig", "LlamaModel", (8, 12, 16))


def mistral() -> Calls:
    # Sliding-window attention, and a forward under stacked decorators whose
    # guards reach through a wrapper's closure.
    return _decoder("MistralConfig", "MistralModel", (6, 12), sliding_window=8)


def bert() -> Calls:
    from transformers import BertConfig, BertModel

    config = BertConfig(
        num_hidden_layers=2,
        hidden_size=128,
        num_attention_heads=4,
        intermediate_size=256,
        vocab_size=512,
        max_position_embeddings=64,
    )
    model = BertModel(config).eval().to(device)
    return _infer(model, [{"input_ids": _ids(512, 2, 16)}])


def t5() -> Calls:
    from transformers import T5Config, T5Model

    config = T5Config(
        num_layers=2,
        num_decoder_layers=2,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_heads=4,
        vocab_size=512,
        decoder_start_token_id=0,
    )
    model = T5Model(config).eval().to(device)
    return _infer(model, [{"input_ids": _ids(512, 1, 10), "decoder_input_ids": _ids(512, 1, 6)}])


def gpt2_train() -> Calls:
    """One training step: compiled forward and backward, eager optimizer step.

    The loss is taken outside the model: with `labels=`, transformers calls
    `self.loss_function`, a property whose code torch's package cannot name
    (PackageError under caching_precompile, with or without precompile).
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    # Dropout off: the step must compute the same thing in both processes.
    config = GPT2Config(
        n_layer=1,
        n_embd=64,
        n_head=2,
        n_positions=32,
        vocab_size=256,
        attn_pdrop=0.0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
    )
    model = GPT2LMHeadModel(config).train().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = _ids(256, 2, 8)

    def calls() -> list[torch.Tensor]:
        fn = compile_fn(model)
        logits = fn(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 256), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        return [loss.detach(), model.transformer.wte.weight.detach().clone()]

    return calls


MODELS: dict[str, tuple[str, Callable[[], Calls]]] = {
    "resnet18": ("torchvision", resnet18),
    "mobilenet_v3_small": ("torchvision", mobilenet_v3_small),
    "gpt2": ("transformers", gpt2),
    "llama": ("transformers", llama),
    "mistral": ("transformers", mistral),
    "bert": ("transformers", bert),
    "t5": ("transformers", t5),
    "gpt2_train": ("transformers", gpt2_train),
}


def missing_reason(name: str) -> str | None:
    """Why corpus model `name` cannot run here (its library is missing), or None."""
    library = MODELS[name][0]
    try:
        __import__(library)
    except ImportError as e:
        return f"{name} needs {library} ({e})"
    return None


def available() -> list[str]:
    return [name for name in MODELS if missing_reason(name) is None]


def build(name: str) -> Calls:
    """Build corpus model `name` and its inputs with fixed seeds; the result
    compiles the model and makes its calls."""
    torch.manual_seed(0)
    calls = MODELS[name][1]()
    return lambda: [t.detach().clone() for t in calls()]


def run(name: str) -> list[torch.Tensor]:
    """Build, compile and run corpus model `name`."""
    return build(name)()
