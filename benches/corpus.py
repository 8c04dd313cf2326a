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

import os
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["CORE", "EXTENDED", "MODELS", "available", "build", "missing_reason", "run", "selected"]

# Compiles the built model and makes its first calls; returns their outputs.
Calls = Callable[[], list[torch.Tensor]]

# What the models are compiled with; the warm-start bench swaps in the
# identity to time eager PyTorch on the same calls.
compile_fn: Callable[[torch.nn.Module], Callable] = torch.compile
# Where models and inputs live: PRECOMPILE_CORPUS_DEVICE (default "cpu"), so
# the two-process test runs on a GPU host too; the bench sets it from --device.
device = os.environ.get("PRECOMPILE_CORPUS_DEVICE", "cpu").strip() or "cpu"


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


def _decoder_config(config_name: str, **extra: object) -> Any:
    """The config of a 2-layer decoder of a Llama-style family (rotary
    embeddings, grouped-query attention, RMSNorm)."""
    import transformers

    return getattr(transformers, config_name)(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=64,
        **extra,
    )


def _decoder(config_name: str, model_name: str, lengths: tuple[int, ...], **extra: object) -> Calls:
    """A 2-layer decoder of a Llama-style family, one input per sequence length."""
    import transformers

    config = _decoder_config(config_name, **extra)
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


# The core corpus: what tests/test_corpus.py and CI run by default.
CORE: dict[str, tuple[str, Callable[[], Calls]]] = {
    "resnet18": ("torchvision", resnet18),
    "mobilenet_v3_small": ("torchvision", mobilenet_v3_small),
    "gpt2": ("transformers", gpt2),
    "llama": ("transformers", llama),
    "mistral": ("transformers", mistral),
    "bert": ("transformers", bert),
    "t5": ("transformers", t5),
    "gpt2_train": ("transformers", gpt2_train),
}


# ----------------------------------------------------------- extended corpus
# More families, each a distinct code path through Dynamo's guards (MoE
# routing, ALiBi, learned and rotary positions, convolutional front ends,
# dynamic shapes). Run them with PRECOMPILE_CORPUS=extended (or all).


def _hf(config_name: str, model_name: str, inputs: list[dict], **config: object) -> Calls:
    import transformers

    model = getattr(transformers, model_name)(getattr(transformers, config_name)(**config))
    return _infer(model.eval().to(device), inputs)


def _texts(batch: int, lengths: tuple[int, ...]) -> list[dict]:
    return [{"input_ids": _ids(256, batch, n)} for n in lengths]


def _pixels(batches: tuple[int, ...], size: int = 32, key: str = "pixel_values") -> list[dict]:
    return [{key: torch.randn(b, 3, size, size, device=device)} for b in batches]


# Shared by the small encoders and decoders below.
_TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    vocab_size=256,
    max_position_embeddings=64,
)


# Shared by the small speech encoders: a two-layer feature extractor, one
# transformer layer, and the weight-normed positional convolution.
_TINY_AUDIO = dict(
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=64,
    conv_dim=(16, 16),
    conv_stride=(5, 4),
    conv_kernel=(10, 8),
    num_conv_pos_embeddings=16,
    num_conv_pos_embedding_groups=4,
    vocab_size=32,
)


def _audio(lengths: tuple[int, ...]) -> list[dict]:
    return [{"input_values": torch.randn(1, n, device=device)} for n in lengths]


# Shared by the small vision transformers.
_TINY_VIT = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=32,
    patch_size=8,
)


def _train_step(model: torch.nn.Module, loss_of: Callable[..., torch.Tensor], lengths: tuple[int, ...]) -> Calls:
    """Compiled forward and backward per length, eager optimizer step."""
    return _train_steps(model, loss_of, [_ids(256, 2, n) for n in lengths])


def _train_steps(model: torch.nn.Module, loss_of: Callable[..., torch.Tensor], batches: list[torch.Tensor]) -> Calls:
    """Compiled forward and backward per batch (`loss_of(compiled, batch)`), eager SGD step."""
    model = model.train().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def calls() -> list[torch.Tensor]:
        fn = compile_fn(model)
        losses = []
        for batch in batches:
            loss = loss_of(fn, batch)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach())
        return losses

    return calls


def llama_train() -> Calls:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**{**_TINY, "num_hidden_layers": 1}, num_key_value_heads=2)

    def loss_of(fn: Callable, ids: torch.Tensor) -> torch.Tensor:
        logits = fn(input_ids=ids).logits
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 256), ids[:, 1:].reshape(-1))

    return _train_step(LlamaForCausalLM(config), loss_of, (8, 12))


def bert_train() -> Calls:
    """A classification head trained through `labels=` (the loss inside the model)."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(**_TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    labels = torch.tensor([0, 1], device=device)
    return _train_step(
        BertForSequenceClassification(config), lambda fn, ids: fn(input_ids=ids, labels=labels).loss, (8, 12)
    )


def gpt2_dynamic() -> Calls:
    """`torch.compile(dynamic=True)`: one graph with a symbolic length serves three."""
    from transformers import GPT2Config, GPT2Model

    model = GPT2Model(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64)).eval().to(device)
    inputs = _texts(1, (5, 9, 13))

    def calls() -> list[torch.Tensor]:
        fn = torch.compile(model, dynamic=True) if compile_fn is torch.compile else compile_fn(model)
        with torch.no_grad():
            return [fn(**kwargs).last_hidden_state for kwargs in inputs]

    return calls


from corpus_families import FAMILIES  # noqa: E402  (it builds on the helpers above)

EXTENDED: dict[str, tuple[str, Callable[[], Calls]]] = {
    # Decoders.
    "qwen2": ("transformers", lambda: _decoder("Qwen2Config", "Qwen2ForCausalLM", (8, 12))),
    "gemma2": ("transformers", lambda: _decoder("Gemma2Config", "Gemma2Model", (6, 12), head_dim=16, sliding_window=8)),
    "phi3": ("transformers", lambda: _decoder("Phi3Config", "Phi3Model", (6, 12), pad_token_id=0)),
    "mixtral": (
        "transformers",
        lambda: _decoder("MixtralConfig", "MixtralModel", (6, 12), num_local_experts=4, num_experts_per_tok=2),
    ),
    "opt": (
        "transformers",
        lambda: _hf(
            "OPTConfig",
            "OPTModel",
            _texts(1, (6, 12)),
            hidden_size=64,
            ffn_dim=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            vocab_size=256,
            max_position_embeddings=64,
            word_embed_proj_dim=64,
        ),
    ),
    "gpt_neox": ("transformers", lambda: _hf("GPTNeoXConfig", "GPTNeoXModel", _texts(1, (6, 12)), **_TINY)),
    "falcon": (
        "transformers",
        lambda: _hf(
            "FalconConfig",
            "FalconModel",
            _texts(1, (6, 12)),
            **{k: v for k, v in _TINY.items() if k != "intermediate_size"},
        ),
    ),
    "bloom": (
        "transformers",
        lambda: _hf(
            "BloomConfig", "BloomModel", _texts(1, (6, 12)), hidden_size=64, n_layer=2, n_head=4, vocab_size=256
        ),
    ),
    # Encoders.
    "distilbert": (
        "transformers",
        lambda: _hf(
            "DistilBertConfig",
            "DistilBertModel",
            _texts(2, (16,)),
            n_layers=2,
            dim=64,
            n_heads=4,
            hidden_dim=128,
            vocab_size=256,
            max_position_embeddings=64,
        ),
    ),
    "roberta": (
        "transformers",
        lambda: _hf("RobertaConfig", "RobertaModel", _texts(2, (8, 16)), **{**_TINY, "max_position_embeddings": 70}),
    ),
    "deberta_v2": ("transformers", lambda: _hf("DebertaV2Config", "DebertaV2Model", _texts(2, (16,)), **_TINY)),
    "albert": (
        "transformers",
        lambda: _hf("AlbertConfig", "AlbertModel", _texts(2, (16,)), embedding_size=32, **_TINY),
    ),
    "electra": (
        "transformers",
        lambda: _hf("ElectraConfig", "ElectraModel", _texts(2, (16,)), embedding_size=32, **_TINY),
    ),
    # Encoder-decoders.
    "bart": (
        "transformers",
        lambda: _hf(
            "BartConfig",
            "BartModel",
            [{"input_ids": _ids(256, 1, 10), "decoder_input_ids": _ids(256, 1, 6)}],
            encoder_layers=1,
            decoder_layers=1,
            d_model=64,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            vocab_size=256,
            max_position_embeddings=64,
        ),
    ),
    "whisper": (
        "transformers",
        lambda: _hf(
            "WhisperConfig",
            "WhisperModel",
            [{"input_features": torch.randn(1, 16, 32, device=device), "decoder_input_ids": _ids(256, 1, 5)}],
            d_model=64,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            vocab_size=256,
            num_mel_bins=16,
            max_source_positions=16,
            max_target_positions=32,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=1,
        ),
    ),
    # Audio: weight-normed convolutions (a parametrized module's run-time class).
    "wav2vec2": ("transformers", lambda: _hf("Wav2Vec2Config", "Wav2Vec2Model", _audio((1600,)), **_TINY_AUDIO)),
    "hubert": ("transformers", lambda: _hf("HubertConfig", "HubertModel", _audio((1600,)), **_TINY_AUDIO)),
    # Vision.
    "vit_hf": ("transformers", lambda: _hf("ViTConfig", "ViTModel", _pixels((1, 2)), **_TINY_VIT)),
    "clip_vision": ("transformers", lambda: _hf("CLIPVisionConfig", "CLIPVisionModel", _pixels((1, 2)), **_TINY_VIT)),
    "resnet_hf": (
        "transformers",
        lambda: _hf(
            "ResNetConfig", "ResNetModel", _pixels((1,)), embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1]
        ),
    ),
    "vit_b": (
        "torchvision",
        lambda: _infer(_tv_vit(), _pixels((1, 3), key="x")),
    ),
    "convnext_tiny": ("torchvision", lambda: _infer(_vision("convnext_tiny"), _pixels((1,), key="x"))),
    "efficientnet_b0": ("torchvision", lambda: _infer(_vision("efficientnet_b0"), _pixels((1,), key="x"))),
    "densenet121": ("torchvision", lambda: _infer(_vision("densenet121"), _pixels((1,), key="x"))),
    "squeezenet1_1": ("torchvision", lambda: _infer(_vision("squeezenet1_1"), _pixels((1,), size=64, key="x"))),
    # Training and dynamic shapes.
    "llama_train": ("transformers", llama_train),
    "bert_train": ("transformers", bert_train),
    "gpt2_dynamic": ("transformers", gpt2_dynamic),
    # State-space, diffusion, detection and a second MoE (benches/corpus_families.py).
    **FAMILIES,
}


def _tv_vit() -> torch.nn.Module:
    from torchvision.models.vision_transformer import VisionTransformer

    model = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64)
    return model.eval().to(device)


# Every model, by name.
MODELS: dict[str, tuple[str, Callable[[], Calls]]] = {**CORE, **EXTENDED}


def selected() -> list[str]:
    """The models to run: PRECOMPILE_CORPUS names them (comma-separated),
    or says `core` (the default), `extended` or `all`."""
    choice = os.environ.get("PRECOMPILE_CORPUS", "core").strip() or "core"
    groups = {"core": list(CORE), "extended": list(EXTENDED), "all": list(MODELS)}
    if choice in groups:
        return groups[choice]
    names = [n.strip() for n in choice.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise ValueError(f"PRECOMPILE_CORPUS names unknown models {unknown}; known: {sorted(MODELS)}")
    return names


def missing_reason(name: str) -> str | None:
    """Why corpus model `name` cannot run here (its library is missing), or None."""
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        return f"{name} runs on {device}, and this host has no CUDA device"
    library = MODELS[name][0]
    try:
        __import__(library)
    except ImportError as e:
        return f"{name} needs {library} ({e})"
    return None


def available() -> list[str]:
    """The selected models whose library is installed."""
    return [name for name in selected() if missing_reason(name) is None]


def build(name: str) -> Calls:
    """Build corpus model `name` and its inputs with fixed seeds; the result
    compiles the model and makes its calls."""
    torch.manual_seed(0)
    calls = MODELS[name][1]()
    return lambda: [t.detach().clone() for t in calls()]


def run(name: str) -> list[torch.Tensor]:
    """Build, compile and run corpus model `name`."""
    return build(name)()
