"""Weights into a built model without a second copy in memory, and the decoder part of a transmitter.

A checkpoint is read memory-mapped (`torch.load(mmap=True)` in `shap_e.util.tensor_files`, and `.safetensors` files are mapped
by their reader), so its tensors occupy memory only as the model touches them; `assign_state` then
makes those tensors the model's own (`load_state_dict(assign=True)`) instead of copying them into
freshly allocated parameters. A model built under `shap_e.util.config.skip_weight_init` never
touches its own allocation, so loading costs one copy of the weights, not two.

A `Transmitter` checkpoint holds a whole `ChannelsDecoder`: its `encoder.params_proj.*` and
`renderer.*` entries (docs/behaviour.md, "Decoder"). `decoder_state` and `decoder_config` take that
part, so decoding latents reads about half of the transmitter's weights.
"""
from typing import Any, Dict, Mapping

import torch
import torch.nn as nn

__all__ = ["assign_state", "decoder_config", "decoder_state"]

_PARAMS_PROJ = "encoder.params_proj."


def assign_state(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Make `state`'s tensors `model`'s parameters and buffers (strict keys), each cast to the dtype
    and device of the entry it replaces; a tensor that already has both is taken as is, not copied.

    The caller checks that keys and shapes fit (`shap_e.models.download.load_state_dict_strict`).
    """
    own = model.state_dict(keep_vars=True)
    fitted = {name: tensor.to(device=own[name].device, dtype=own[name].dtype) for name, tensor in state.items()}
    model.load_state_dict(fitted, strict=True, assign=True)


def decoder_state(transmitter_state: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """The `ChannelsDecoder` entries of a `Transmitter` state dict: `encoder.params_proj.*` renamed
    `params_proj.*`, and `renderer.*`; the encoder's other weights are left out (never read)."""
    state = {}
    for name, tensor in transmitter_state.items():
        if name.startswith(_PARAMS_PROJ):
            state["params_proj." + name[len(_PARAMS_PROJ):]] = tensor
        elif name.startswith("renderer."):
            state[name] = tensor
    if not state:
        raise ValueError("the state dict has no encoder.params_proj.* or renderer.* entries; it is not a Transmitter's")
    return state


def decoder_config(transmitter_config: Mapping[str, Any]) -> Dict[str, Any]:
    """The `ChannelsDecoder` config that decodes a `Transmitter` config's latents with its weights
    (`decoder_state`): its encoder's `d_latent` and `params_proj`, its renderer, and the latent
    tokens the renderer's meta weights take."""
    from shap_e.models.configs import model_from_config
    from shap_e.models.transmitter.base import meta_param_shapes

    if transmitter_config.get("name") != "Transmitter":
        raise ValueError(f"decoder_config needs a Transmitter config, got name={transmitter_config.get('name')!r}")
    encoder, renderer = transmitter_config["encoder"], transmitter_config["renderer"]
    shapes = meta_param_shapes(model_from_config(dict(renderer), "meta"))  # a weightless copy gives the shapes
    latent_ctx = sum(shape[0] for shape in shapes.values())
    return {"name": "ChannelsDecoder", "d_latent": encoder["d_latent"], "latent_ctx": latent_ctx,
            "params_proj": dict(encoder["params_proj"]), "renderer": renderer}
