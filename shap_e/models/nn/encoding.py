"""NeRF positional encodings of positions and directions (Mildenhall et al. 2020)."""
import math
from typing import Optional

import torch


def posenc_nerf(x: torch.Tensor, min_deg: int = 0, max_deg: int = 15) -> torch.Tensor:
    """NeRF positional encoding (Mildenhall et al. 2020, eq. 4), laid out as the reference does.

    :param x: `[..., D]` coordinates.
    :return: `[..., D * (1 + 2 * (max_deg - min_deg))]` = `cat([x, sin(xb), sin(xb + pi/2)])`
        where `xb[..., j * D + c] = x[..., c] * 2**(min_deg + j)`.

    The second block is `sin(xb + pi/2)` rather than `cos(xb)` on purpose: at frequency 2**14 the
    float32 rounding of `xb + pi/2` is visible and the official checkpoints saw exactly that.
    """
    if min_deg == max_deg:
        return x
    scales = 2.0 ** torch.arange(min_deg, max_deg, dtype=x.dtype, device=x.device)
    xb = (x[..., None, :] * scales[:, None]).reshape(*x.shape[:-1], -1)
    emb = torch.sin(torch.cat([xb, xb + math.pi / 2.0], dim=-1))
    return torch.cat([x, emb], dim=-1)


def encode_position(position: torch.Tensor) -> torch.Tensor:
    """`[..., 3]` positions -> `[..., 93]` features (degrees 0..14)."""
    return posenc_nerf(position, min_deg=0, max_deg=15)


def encode_direction(position: torch.Tensor, direction: Optional[torch.Tensor] = None) -> torch.Tensor:
    """`[..., 3]` directions -> `[..., 51]` features (degrees 0..7); zeros when no direction is given."""
    if direction is None:
        return torch.zeros(*position.shape[:-1], 51, dtype=position.dtype, device=position.device)
    return posenc_nerf(direction, min_deg=0, max_deg=8)
