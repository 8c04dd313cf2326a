"""Extended corpus families beyond text and image classifiers: state-space and
recurrent models, diffusion denoisers, detection and segmentation heads, a
second MoE, a vocoder, a neural audio codec and a windowed vision transformer.

Each is a tiny random-weight config from a PyPI package, called as a user
calls it. Part of corpus.EXTENDED; the helpers (`_infer`, `device`, the bench's
`compile_fn`) are read from `corpus` at call time, so the bench's swaps apply.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import torch

__all__ = ["FAMILIES"]

Calls = Callable[[], list[torch.Tensor]]


def _corpus() -> ModuleType:
    # corpus imports this module while it loads, so not at import time.
    import corpus

    return corpus


def mamba() -> Calls:
    """Mamba's selective scan on the pure-PyTorch path (no mamba-ssm kernels,
    as a pip install runs it), over two lengths."""
    from transformers import MambaConfig, MambaModel

    c = _corpus()
    config = MambaConfig(hidden_size=64, state_size=8, num_hidden_layers=2, vocab_size=256, expand=2, conv_kernel=4)
    return c._infer(MambaModel(config).eval().to(c.device), c._texts(1, (6, 12)))


def unet() -> Calls:
    """A text-conditioned diffusion UNet (cross-attention blocks), as a
    denoising step calls it, at two latent sizes."""
    from diffusers import UNet2DConditionModel

    c = _corpus()
    model = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        layers_per_block=1,
        block_out_channels=(16, 32),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=16,
        attention_head_dim=4,
        norm_num_groups=8,
    )
    text = torch.randn(1, 4, 16, device=c.device)
    inputs = [
        {"sample": torch.randn(1, 4, n, n, device=c.device), "timestep": 10, "encoder_hidden_states": text}
        for n in (8, 16)
    ]
    return c._infer(model.eval().to(c.device), inputs)


def dit() -> Calls:
    """A class-conditioned diffusion transformer (adaptive layer norm from the
    timestep and class label), batch of two."""
    from diffusers import DiTTransformer2DModel

    c = _corpus()
    model = DiTTransformer2DModel(
        num_attention_heads=2,
        attention_head_dim=8,
        in_channels=4,
        out_channels=4,
        num_layers=2,
        sample_size=8,
        patch_size=2,
        num_embeds_ada_norm=10,
    )
    inputs = [
        {
            "hidden_states": torch.randn(2, 4, 8, 8, device=c.device),
            "timestep": torch.tensor([t, t + 1], device=c.device),
            "class_labels": torch.tensor([1, 7], device=c.device),
        }
        for t in (3, 500)
    ]
    return c._infer(model.eval().to(c.device), inputs)


def segmentation() -> Calls:
    """DeepLabV3 (MobileNetV3 backbone, atrous pyramid pooling head)."""
    from torchvision.models.segmentation import deeplabv3_mobilenet_v3_large

    c = _corpus()
    model = deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=4)
    return c._infer(model.eval().to(c.device), c._pixels((1,), size=64, key="x"))


def detection() -> Calls:
    """SSDlite: resize and normalize, backbone, then box decoding and
    non-maximum suppression, whose data-dependent shapes break the graph."""
    from torchvision.models.detection import ssdlite320_mobilenet_v3_large

    c = _corpus()
    model = ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=3, detections_per_img=10, topk_candidates=20
    ).eval()
    model = model.to(c.device)
    images = [[torch.rand(3, 64, 80, device=c.device)], [torch.rand(3, 96, 64, device=c.device)]]

    def calls() -> list[torch.Tensor]:
        fn = c.compile_fn(model)
        out: list[torch.Tensor] = []
        with torch.no_grad():
            for batch in images:
                for found in fn(batch):
                    out += [found["boxes"], found["scores"], found["labels"]]
        return out

    return calls


def moe() -> Calls:
    """Qwen2-MoE: top-k routing over experts plus a gated shared expert."""
    c = _corpus()
    return c._decoder(
        "Qwen2MoeConfig",
        "Qwen2MoeModel",
        (6, 12),
        moe_intermediate_size=32,
        shared_expert_intermediate_size=64,
        num_experts=4,
        num_experts_per_tok=2,
    )


def hifigan() -> Calls:
    """A HiFi-GAN vocoder (SpeechT5's): transposed-conv upsampling and dilated
    residual blocks, mel frames in, a waveform out, at two lengths."""
    c = _corpus()
    return c._hf(
        "SpeechT5HifiGanConfig",
        "SpeechT5HifiGan",
        [{"spectrogram": torch.randn(n, 16, device=c.device)} for n in (20, 32)],
        model_in_dim=16,
        upsample_initial_channel=32,
        upsample_rates=[4, 4],
        upsample_kernel_sizes=[8, 8],
        resblock_kernel_sizes=[3, 7],
        resblock_dilation_sizes=[[1, 3], [1, 3]],
    )


def encodec() -> Calls:
    """EnCodec: weight-normed conv encoder and decoder (parametrized modules),
    an LSTM, and residual vector quantization between them."""
    c = _corpus()
    return c._hf(
        "EncodecConfig",
        "EncodecModel",
        [{"input_values": torch.randn(1, 1, 800, device=c.device)}],
        num_filters=4,
        hidden_size=16,
        upsampling_ratios=[4, 2],
        codebook_size=32,
        codebook_dim=16,
        num_lstm_layers=1,
        target_bandwidths=[12.0],
        sampling_rate=8000,
    )


def mamba2() -> Calls:
    """Mamba-2's chunked state-space scan on the pure-PyTorch path."""
    c = _corpus()
    return c._hf(
        "Mamba2Config",
        "Mamba2Model",
        c._texts(1, (6, 12)),
        hidden_size=64,
        state_size=8,
        num_hidden_layers=2,
        vocab_size=256,
        expand=2,
        conv_kernel=4,
        num_heads=8,
        head_dim=16,
        n_groups=1,
        chunk_size=8,
    )


def rwkv() -> Calls:
    """RWKV: a recurrent time-mixing block (the WKV recurrence in PyTorch)."""
    c = _corpus()
    return c._hf(
        "RwkvConfig",
        "RwkvModel",
        c._texts(1, (6, 12)),
        hidden_size=64,
        num_hidden_layers=2,
        vocab_size=256,
        attention_hidden_size=64,
        intermediate_size=128,
        context_length=64,
    )


def swin() -> Calls:
    """Swin: shifted-window attention with patch merging, at two batch sizes."""
    c = _corpus()
    return c._hf(
        "SwinConfig",
        "SwinModel",
        c._pixels((1, 2)),
        image_size=32,
        patch_size=4,
        embed_dim=16,
        depths=[1, 1],
        num_heads=[2, 2],
        window_size=4,
    )


FAMILIES: dict[str, tuple[str, Callable[[], Calls]]] = {
    "mamba": ("transformers", mamba),
    "unet": ("diffusers", unet),
    "dit": ("diffusers", dit),
    "segmentation": ("torchvision", segmentation),
    "detection": ("torchvision", detection),
    "moe": ("transformers", moe),
    "hifigan": ("transformers", hifigan),
    "encodec": ("transformers", encodec),
    "mamba2": ("transformers", mamba2),
    "rwkv": ("transformers", rwkv),
    "swin": ("transformers", swin),
}
