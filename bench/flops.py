"""Analytic FLOP count of one forward pass of a latent diffusion transformer (multiply-add = 2 FLOPs).

For a trunk of width `w`, `L` layers, `n` latent tokens of `c_in` input / `c_out` output channels
and `k` prepended conditioning tokens (sequence length `T = n + k`), per sample:

* each block's linears: `c_qkv` 3w², `c_proj` w², MLP 4w² + 4w² = 12w² MACs per token
  -> `24 · T · w²` FLOPs (= 2 · block params · tokens);
* each block's attention: `q kᵀ` and `softmax · v`, `T² · w` MACs each -> `4 · T² · w` FLOPs;
* `input_proj` and `output_proj` on the `n` latent tokens: `2 · n · w · (c_in + c_out)`;
* conditioning projections (time MLP, CLIP projection), once per sample: `2 · (8w² + d_cond · w)`.

LayerNorms, GELU, softmax and residual adds are O(T·w) and left out (< 0.5 % at full size).
"""
from typing import Any, Dict


def transformer_forward_flops(
    *, width: int, layers: int, n_ctx: int, in_channels: int, out_channels: int,
    cond_tokens: int, cond_width: int, batch: int,
) -> Dict[str, float]:
    """FLOPs of one forward of `batch` samples: `{"linear", "attention", "total"}` (module docstring)."""
    seq = n_ctx + cond_tokens
    blocks = layers * 24.0 * seq * width**2
    projections = 2.0 * n_ctx * width * (in_channels + out_channels)
    conditioning = 2.0 * (8 * width**2 + cond_width * width)
    linear = batch * (blocks + projections + conditioning)
    attention = batch * layers * 4.0 * seq**2 * width
    return {"linear": linear, "attention": attention, "total": linear + attention}


def text_model_flops(config: Dict[str, Any], batch: int) -> Dict[str, float]:
    """FLOPs of one forward of a `SplitVectorDiffusion` text model built from `config` (the YAML dict)."""
    inner = config["inner"]
    n_ctx = config["latent_ctx"]
    channels = config["d_latent"] // n_ctx
    cond_tokens = int(inner.get("token_cond", False)) + int(inner.get("time_token_cond", False))
    return transformer_forward_flops(
        width=inner["width"], layers=inner["layers"], n_ctx=n_ctx, in_channels=channels,
        out_channels=2 * channels, cond_tokens=cond_tokens, cond_width=768, batch=batch,
    )
