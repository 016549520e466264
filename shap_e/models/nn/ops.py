"""Point tokens: ball-query neighbourhoods of the first `data_ctx` points, convolved (docs/behaviour.md#point-tokens).

The reference shuffles every neighbourhood's samples (independently per batch element and
channel) before each convolution, in eval mode too, so the encoder is stochastic. The draws are
made here in the reference's order, from `generator` or the global RNG.
"""
from typing import Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from shap_e.models.nn.pointnet2_utils import ball_query, gather_points
from shap_e.util.rng import draw_device


class PointSetEmbedding(nn.Module):
    """Ball-query groups -> shuffled strided convolutions over the samples -> mean (one token per centre)."""

    def __init__(
        self,
        *,
        n_point: int,
        n_sample: int,
        d_input: int,
        hidden: Sequence[int],
        patch_size: int,
        stride: int,
        radius: float = 0.5,
        padding_mode: str = "circular",
        device=None,
    ):
        super().__init__()
        self.n_point = n_point
        self.n_sample = n_sample
        self.radius = radius
        channels = [d_input + 3, *hidden]
        self.mlp_convs = nn.ModuleList(
            nn.Conv2d(
                c_in,
                c_out,
                kernel_size=(patch_size, 1),
                stride=(stride, 1),
                padding=(patch_size // 2, 0),
                padding_mode=padding_mode,
                device=device,
            )
            for c_in, c_out in zip(channels[:-1], channels[1:])
        )

    def forward(
        self, xyz: torch.Tensor, features: torch.Tensor, generator: Optional[torch.Generator] = None
    ) -> torch.Tensor:
        """`[batch, 3, n]` coordinates and `[batch, d_input, n]` features -> `[batch, hidden[-1], n_point]`."""
        xyz_t = xyz.permute(0, 2, 1)
        centres = xyz_t[:, : self.n_point]
        index = ball_query(self.radius, self.n_sample, xyz_t, centres)
        grouped_xyz = gather_points(xyz_t, index) - centres[:, :, None]
        grouped = torch.cat([grouped_xyz, gather_points(features.permute(0, 2, 1), index)], dim=-1)
        h = grouped.permute(0, 3, 2, 1)  # [batch, channels, n_sample, n_point]
        for conv in self.mlp_convs:
            batch, channels, samples, _ = h.shape
            noise = torch.rand(batch, channels, samples, 1, generator=generator,
                               device=draw_device(generator, h.device)).to(h.device)
            perm = torch.argsort(noise, dim=2)
            h = torch.gather(h, 2, perm.expand_as(h))
            h = F.silu(conv(h))
        return h.mean(dim=2)
