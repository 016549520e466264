"""Official module path `shap_e.models.stf.mlp`: the MLP field of STF (and, with more heads, of
NeRSTF), with optional meta layers whose tensors come from `params` (a latent's projection).

`MLPModel` encodes the position (`shap_e.models.nn.encoding`, "v1" or "nerf"), runs linear
layers with `activation` between them, concatenates the encoded view direction before layer
`insert_direction_at`, and applies `output_activation`. Layers `meta_start..meta_stop` are
`MetaLinear`s when `meta_parameters`. `MLPSDFModel` and `MLPTextureFieldModel` name its output.
"""
from typing import Callable, Optional, Tuple

import torch
import torch.nn as nn

from shap_e.models.nn.checkpoint import checkpoint
from shap_e.models.nn.encoding import encode_position, maybe_encode_direction
from shap_e.models.nn.meta import MetaModule, subdict
from shap_e.models.nn.ops import MetaLinear, get_act, mlp_init
from shap_e.models.query import Query
from shap_e.models.stf.base import Model
from shap_e.util.collections import AttrDict

__all__ = ["MLPModel", "MLPSDFModel", "MLPTextureFieldModel", "run_mlp"]


def run_mlp(
    layers: nn.ModuleList,
    h: torch.Tensor,
    params: Optional[dict],
    activation: Callable[[torch.Tensor], torch.Tensor],
    insert_direction_at: Optional[int] = None,
    direction_features: Optional[Callable[[], torch.Tensor]] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """`layers` on the features `h [..., d_in]`, `activation` between them; a `MetaLinear` layer i
    reads its tensors under `mlp.{i}.` in `params`; `direction_features()` is concatenated before
    layer `insert_direction_at`. Returns the output and the pre-activation features entering the
    direction layer (the last layer's output when there is none)."""
    h_directionless, h_preact = None, h
    last = len(layers) - 1
    for i, layer in enumerate(layers):
        if i == insert_direction_at:
            h_directionless = h_preact
            h = torch.cat([h, direction_features()], dim=-1)
        h = layer(h, params=subdict(params, f"mlp.{i}")) if isinstance(layer, MetaLinear) else layer(h)
        h_preact = h
        if i < last:
            h = activation(h)
    return h, h_preact if h_directionless is None else h_directionless


class MLPModel(MetaModule, Model):
    """The STF MLP: `n_hidden_layers` hidden layers of `d_hidden`, then `n_output` channels."""

    def __init__(
        self,
        n_output: int,
        output_activation: str,
        posenc_version: str = "v1",
        insert_direction_at: Optional[int] = None,
        d_hidden: int = 256,
        n_hidden_layers: int = 4,
        activation: str = "relu",
        init: Optional[str] = None,
        init_scale: float = 1.0,
        meta_parameters: bool = False,
        trainable_meta: bool = False,
        meta_proj: bool = True,
        meta_bias: bool = True,
        meta_start: int = 0,
        meta_stop: Optional[int] = None,
        n_meta_layers: Optional[int] = None,
        register_freqs: bool = False,
        device: Optional[torch.device] = None,
    ):
        super().__init__()
        if register_freqs:  # kept for the checkpoints' keys; the encodings compute their own
            self.register_buffer("freqs", 2.0 ** torch.arange(10, dtype=torch.float32).view(1, 10))
        self.posenc_version, self.insert_direction_at = posenc_version, insert_direction_at
        dummy = torch.zeros(1, 3)
        d_ins = [encode_position(posenc_version, position=dummy).shape[-1]] + [d_hidden] * n_hidden_layers
        d_outs = [d_hidden] * n_hidden_layers + [n_output]
        if insert_direction_at is not None:
            if not 0 <= insert_direction_at <= n_hidden_layers:
                raise ValueError(f"insert_direction_at must be a layer index in 0..{n_hidden_layers}, got {insert_direction_at}")
            d_ins[insert_direction_at] += maybe_encode_direction(posenc_version, position=dummy).shape[-1]
        if meta_stop is None:
            if n_meta_layers is not None and n_meta_layers < 1:
                raise ValueError(f"n_meta_layers must be positive, got {n_meta_layers}")
            meta_stop = n_hidden_layers if n_meta_layers is None else meta_start + n_meta_layers - 1
        meta = [meta_parameters and meta_start <= i <= meta_stop for i in range(n_hidden_layers + 1)]
        self.mlp = nn.ModuleList(
            MetaLinear(d_in, d_out, meta_scale=False, meta_shift=False, meta_proj=meta_proj, meta_bias=meta_bias,
                       trainable_meta=trainable_meta, device=device)
            if is_meta else nn.Linear(d_in, d_out, device=device)
            for is_meta, d_in, d_out in zip(meta, d_ins, d_outs)
        )
        mlp_init(self.mlp, init=init, init_scale=init_scale)
        self.activation, self.output_activation = get_act(activation), get_act(output_activation)
        self.to(device)

    def forward(self, query: Query, params: Optional[dict] = None, options: Optional[dict] = None) -> torch.Tensor:
        """`output_activation` of the MLP at `query.position [batch, ..., 3]` -> `[batch, ..., n_output]`."""
        h_final, _ = self._mlp(query.position, query.direction, params=params, options=options)
        return self.output_activation(h_final)

    def _mlp(self, position, direction, params=None, options=None) -> Tuple[torch.Tensor, torch.Tensor]:
        """(output, directionless features) before the output activation; `options.checkpoint_stf_model`
        checkpoints the MLP."""
        params = self.update(params)
        options = AttrDict() if options is None else AttrDict(options)

        def run(position: torch.Tensor):
            def direction_features() -> torch.Tensor:
                return maybe_encode_direction(self.posenc_version, position=position, direction=direction)

            h = encode_position(self.posenc_version, position=position)
            return run_mlp(self.mlp, h, params, self.activation, self.insert_direction_at, direction_features)

        tensors = []
        for i, layer in enumerate(self.mlp):
            meta = isinstance(layer, MetaLinear)
            tensors.extend(subdict(params, f"mlp.{i}").values() if meta else layer.parameters())
        return checkpoint(run, (position,), tensors, bool(options.get("checkpoint_stf_model", False)))


class MLPSDFModel(MLPModel):
    """An `MLPModel` with one linear output, `signed_distance`; the output bias starts at `initial_bias`."""

    def __init__(self, initial_bias: float = -0.1, **kwargs):
        super().__init__(n_output=1, output_activation="identity", **kwargs)
        with torch.no_grad():
            self.mlp[-1].bias.fill_(initial_bias)

    def forward(self, query: Query, params: Optional[dict] = None, options: Optional[dict] = None) -> AttrDict:
        return AttrDict(signed_distance=super().forward(query=query, params=params, options=options))


class MLPTextureFieldModel(MLPModel):
    """An `MLPModel` with `n_channels` sigmoid outputs, `channels` (colours in [0, 1])."""

    def __init__(self, n_channels: int = 3, **kwargs):
        super().__init__(n_output=n_channels, output_activation="sigmoid", **kwargs)

    def forward(self, query: Query, params: Optional[dict] = None, options: Optional[dict] = None) -> AttrDict:
        return AttrDict(channels=super().forward(query=query, params=params, options=options))
