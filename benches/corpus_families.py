"""Extended corpus families beyond text and image classifiers: state-space and
recurrent models, diffusion denoisers, detection and segmentation heads, a
second MoE, a vocoder, a neural audio codec, a windowed vision transformer and
a classifier trained through auxiliary heads.

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


def jamba() -> Calls:
    """Jamba: Mamba layers interleaved with attention, and a routed MoE MLP."""
    c = _corpus()
    return c._hf(
        "JambaConfig",
        "JambaModel",
        c._texts(1, (6, 12)),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        num_experts=4,
        num_experts_per_tok=2,
        expert_layer_period=2,
        expert_layer_offset=1,
        attn_layer_period=2,
        attn_layer_offset=1,
        mamba_d_state=8,
        mamba_d_conv=4,
        mamba_expand=2,
        use_mamba_kernels=False,
    )


def gpt_bigcode() -> Calls:
    """GPT-BigCode (StarCoder's): multi-query attention, one shared key/value head."""
    c = _corpus()
    return c._hf(
        "GPTBigCodeConfig",
        "GPTBigCodeModel",
        c._texts(1, (6, 12)),
        n_embd=64,
        n_layer=2,
        n_head=4,
        vocab_size=256,
        n_positions=64,
    )


def mobilevit() -> Calls:
    """MobileViT: inverted-residual convs with unfold/fold transformer blocks."""
    c = _corpus()
    return c._hf(
        "MobileViTConfig",
        "MobileViTModel",
        c._pixels((1,), size=64),
        image_size=64,
        hidden_sizes=[32, 48, 64],
        neck_hidden_sizes=[8, 16, 24, 32, 48, 64, 80],
        num_attention_heads=2,
    )


def detr() -> Calls:
    """DETR: a ResNet backbone, sine position embeddings, an encoder-decoder
    transformer over object queries, and box and class heads."""
    from transformers import DetrConfig, DetrForObjectDetection, ResNetConfig

    c = _corpus()
    backbone = ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], out_features=["stage4"]
    )
    config = DetrConfig(
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=backbone,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_queries=10,
    )
    return c._infer(DetrForObjectDetection(config).eval().to(c.device), c._pixels((1,), size=64))


def perceiver() -> Calls:
    """Perceiver: cross-attention from a fixed latent array onto the inputs."""
    c = _corpus()
    return c._hf(
        "PerceiverConfig",
        "PerceiverModel",
        [{"inputs": torch.randn(1, n, 32, device=c.device)} for n in (12, 20)],
        num_latents=16,
        d_latents=32,
        d_model=32,
        num_blocks=1,
        num_self_attends_per_block=1,
        num_self_attention_heads=2,
        num_cross_attention_heads=2,
    )


def sam() -> Calls:
    """Segment Anything: a windowed ViT image encoder, a point prompt encoder
    and a two-way transformer mask decoder."""
    c = _corpus()
    return c._hf(
        "SamConfig",
        "SamModel",
        [
            {
                "pixel_values": torch.randn(1, 3, 64, 64, device=c.device),
                "input_points": torch.tensor([[[[10.0, 20.0]]]], device=c.device),
            }
        ],
        vision_config=dict(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=64,
            patch_size=8,
            output_channels=16,
            window_size=4,
            global_attn_indexes=[1],
            mlp_dim=64,
            num_pos_feats=8,
        ),
        prompt_encoder_config=dict(hidden_size=16, image_size=64, patch_size=8, mask_input_channels=4),
        mask_decoder_config=dict(
            hidden_size=16, num_hidden_layers=2, num_attention_heads=2, mlp_dim=32, iou_head_hidden_dim=16
        ),
    )


def _generate(cache_implementation: str | None) -> Calls:
    """Greedy decoding with `generate()` through a compiled forward, as a
    serving process runs it: a prefill, then one call per new token against
    the growing key/value cache, for two prompts of different lengths."""
    from transformers import LlamaForCausalLM

    c = _corpus()
    model = LlamaForCausalLM(c._decoder_config("LlamaConfig")).eval().to(c.device)
    prompts = [c._ids(256, 1, n) for n in (5, 9)]

    def calls() -> list[torch.Tensor]:
        model.forward = c.compile_fn(type(model).forward.__get__(model))
        extra = {} if cache_implementation is None else {"cache_implementation": cache_implementation}
        with torch.no_grad():
            return [model.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=0, **extra) for ids in prompts]

    return calls


def generate() -> Calls:
    """`generate()` with the default dynamic cache: the cache length changes at
    every step, so Dynamo compiles a dynamic-length variant."""
    return _generate(None)


def generate_static() -> Calls:
    """`generate()` with a static (preallocated) cache, as torch.compile serving
    recipes run it: fixed shapes, the position passed in a tensor."""
    return _generate("static")


def googlenet_train() -> Calls:
    """GoogLeNet trained with its auxiliary heads: in training mode the model
    returns a `NamedTuple` (`GoogLeNetOutputs`) built inside the compiled
    frame. Compiled forward and backward, eager optimizer step."""
    import torchvision.models as tvm

    def loss_of(fn: Callable, x: torch.Tensor) -> torch.Tensor:
        out = fn(x)
        return out.logits.logsumexp(-1).mean() + 0.3 * (
            out.aux_logits1.square().mean() + out.aux_logits2.square().mean()
        )

    c = _corpus()
    model = tvm.googlenet(weights=None, aux_logits=True, init_weights=False, num_classes=10)
    return c._train_steps(model, loss_of, [torch.randn(2, 3, 96, 96, device=c.device) for _ in range(2)])


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
    "jamba": ("transformers", jamba),
    "gpt_bigcode": ("transformers", gpt_bigcode),
    "mobilevit": ("transformers", mobilevit),
    "detr": ("transformers", detr),
    "perceiver": ("transformers", perceiver),
    "sam": ("transformers", sam),
    "generate": ("transformers", generate),
    "generate_static": ("transformers", generate_static),
    "googlenet_train": ("torchvision", googlenet_train),
}
