"""Positional encodings (official path, the real home): the NeRF encoding (Mildenhall et al. 2020),
the "v1" Fourier encoding, spherical harmonics for directions, and the layers that embed encoded
points and multiview pixels.

`version` names an encoding: "nerf" (positions with degrees 0..14, directions 0..7) or "v1"
(cos/sin at frequencies 2^0..2^9 per channel; directions as degree-4 spherical harmonics).
"""
import math
from typing import Optional

import torch
import torch.nn as nn

__all__ = [
    "MultiviewPointCloudEmbedding", "MultiviewPoseEmbedding", "PosEmbLinear", "channel_encoding_channels",
    "encode_channels", "encode_direction", "encode_position", "maybe_encode_direction", "posenc_nerf",
    "position_encoding_channels", "spherical_harmonics_basis",
]

VERSIONS = ("nerf", "v1")
V1_DEGREES = 10
V1_SH_DEGREE = 4


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


def _fourier_v1(x: torch.Tensor) -> torch.Tensor:
    """`[..., D]` -> `[..., D * 20]`: per channel c, `cos(x_c 2^k)` for k = 0..9 then `sin(x_c 2^k)`."""
    scales = 2.0 ** torch.arange(V1_DEGREES, dtype=x.dtype, device=x.device)
    angles = x.reshape(-1, 1) * scales
    return torch.cat([angles.cos(), angles.sin()], dim=1).reshape(*x.shape[:-1], -1)


def _encode(version: str, x: torch.Tensor) -> torch.Tensor:
    if version == "nerf":
        return posenc_nerf(x, min_deg=0, max_deg=15)
    if version == "v1":
        return _fourier_v1(x)
    raise ValueError(f"unknown encoding version {version!r}; valid: {VERSIONS}")


def encode_position(version: str, *, position: torch.Tensor) -> torch.Tensor:
    """Encoded positions `[..., D]` -> `[..., D * position_encoding_channels(version)]`."""
    return _encode(version, position)


def encode_channels(version: str, *, channels: torch.Tensor) -> torch.Tensor:
    """Encoded channels (e.g. colours) `[..., C]` -> `[..., C * channel_encoding_channels(version)]`."""
    return _encode(version, channels)


def position_encoding_channels(version: Optional[str] = None) -> int:
    """Features per encoded position coordinate (1 without an encoding, 31 for "nerf", 20 for "v1")."""
    if version is None:
        return 1
    return encode_position(version, position=torch.zeros(1, 1)).shape[-1]


def channel_encoding_channels(version: Optional[str] = None) -> int:
    """Features per encoded channel (1 without an encoding, 31 for "nerf", 20 for "v1")."""
    if version is None:
        return 1
    return encode_channels(version, channels=torch.zeros(1, 1)).shape[-1]


def maybe_encode_direction(
    version: str, *, position: torch.Tensor, direction: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Encoded view directions `[..., 3]`, or zeros of that width (from `position`'s shape) without one.

    "nerf": NeRF encoding with degrees 0..7 (51 features for 3-vectors); "v1": spherical harmonics
    of degree 4 (16 features; directions must be unit vectors).
    """
    if version == "nerf":
        if direction is None:
            return position.new_zeros(*position.shape[:-1], position.shape[-1] * (1 + 2 * 8))
        return posenc_nerf(direction, min_deg=0, max_deg=8)
    if version == "v1":
        if direction is None:
            return position.new_zeros(*position.shape[:-1], V1_SH_DEGREE**2)
        return spherical_harmonics_basis(direction, sh_degree=V1_SH_DEGREE)
    raise ValueError(f"unknown encoding version {version!r}; valid: {VERSIONS}")


def encode_direction(position: torch.Tensor, direction: Optional[torch.Tensor] = None) -> torch.Tensor:
    """`maybe_encode_direction("nerf", ...)`: `[..., 3]` directions -> `[..., 51]` (zeros without one)."""
    return maybe_encode_direction("nerf", position=position, direction=direction)


def spherical_harmonics_basis(coords: torch.Tensor, sh_degree: int) -> torch.Tensor:
    """Real spherical harmonics (Condon-Shortley phase) of unit vectors `coords [..., 3]`: bands
    l = 0 .. sh_degree - 1, coefficient `l^2 + l + m` for m = -l .. l -> `[..., sh_degree^2]`.

    m > 0 uses `cos(m phi)`, m < 0 uses `sin(|m| phi)` (the tiny-cuda-nn ordering and signs, e.g.
    `Y_1 = -0.4886 y, 0.4886 z, -0.4886 x`). Computed from the recurrence of the associated
    Legendre polynomials with `(x + iy)^m` for the azimuthal part, so no trigonometry is needed.
    """
    if isinstance(sh_degree, bool) or not isinstance(sh_degree, int) or sh_degree < 1:
        raise ValueError(f"sh_degree must be a positive int (the number of bands), got {sh_degree!r}")
    if coords.shape[-1] != 3:
        raise ValueError(f"coords must be [..., 3] unit vectors, got {tuple(coords.shape)}")
    x, y, z = coords.unbind(-1)
    # (x + iy)^m = sin(theta)^m (cos(m phi) + i sin(m phi)).
    real, imag = [torch.ones_like(x)], [torch.zeros_like(x)]
    for _ in range(1, sh_degree):
        real, imag = real + [real[-1] * x - imag[-1] * y], imag + [real[-1] * y + imag[-1] * x]
    out = [None] * sh_degree**2
    for m in range(sh_degree):
        # legendre[l] = d^m P_l / dz^m (z), l >= m: P_l^m without its sin(theta)^m and phase.
        legendre = {m: torch.full_like(z, float(math.prod(range(1, 2 * m, 2))))}
        for l in range(m + 1, sh_degree):
            previous = legendre.get(l - 2, torch.zeros_like(z))
            legendre[l] = ((2 * l - 1) * z * legendre[l - 1] - (l + m - 1) * previous) / (l - m)
        for l in range(m, sh_degree):
            norm = math.sqrt((2 * l + 1) / (4 * math.pi) * math.factorial(l - m) / math.factorial(l + m))
            if m == 0:
                out[l * l + l] = norm * legendre[l]
            else:
                scale = (-1) ** m * math.sqrt(2) * norm
                out[l * l + l + m] = scale * legendre[l] * real[m]
                out[l * l + l - m] = scale * legendre[l] * imag[m]
    return torch.stack(out, dim=-1)


class PosEmbLinear(nn.Linear):
    """`nn.Linear` on positions encoded by `posemb_version` (None: raw):
    `[..., in_features]` -> `[..., out_features]`."""

    def __init__(self, posemb_version: Optional[str], in_features: int, out_features: int, **kwargs):
        super().__init__(in_features * position_encoding_channels(posemb_version), out_features, **kwargs)
        self.posemb_version = posemb_version

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.posemb_version is not None:
            x = encode_position(self.posemb_version, position=x)
        return super().forward(x)


def _pixel_features(version: Optional[str], channels, *positions) -> torch.Tensor:
    """`cat([enc(channels), enc(position) ...])` of `[B, V, c, H, W]` maps along the channel axis."""
    if version is None:
        return torch.cat([channels, *positions], dim=-3)

    def encoded(fn, x, name):
        return fn(version, **{name: x.permute(0, 1, 3, 4, 2)}).permute(0, 1, 4, 2, 3)

    parts = [encoded(encode_channels, channels, "channels")]
    parts += [encoded(encode_position, p, "position") for p in positions]
    return torch.cat(parts, dim=-3)


class _MultiviewConv(nn.Conv2d):
    """3x3 convolution (padding 1) of per-pixel features `[*batch, in_features, H, W]`."""

    def __init__(self, posemb_version: Optional[str], in_features: int, out_features: int, stride: int, **kwargs):
        super().__init__(in_features, out_features, kernel_size=3, stride=stride, padding=1, **kwargs)
        self.posemb_version = posemb_version

    def _convolve(self, x: torch.Tensor) -> torch.Tensor:
        """`[*batch, in_features, H, W]` -> `[*batch, out_features, H', W']`."""
        *batch, in_features, height, width = x.shape
        out = super().forward(x.reshape(-1, in_features, height, width))
        return out.view(*batch, *out.shape[1:])


class MultiviewPoseEmbedding(_MultiviewConv):
    """Per-pixel (colour, position, view direction) features of multiview images, encoded and convolved.

    The direction takes `maybe_encode_direction`'s width (the reference sizes the convolution for a
    position encoding there, so that only `posemb_version=None` runs; the widths agree for None).
    """

    def __init__(self, posemb_version: Optional[str], n_channels: int, out_features: int, stride: int = 1, **kwargs):
        direction_features = 3
        if posemb_version is not None:
            direction_features = maybe_encode_direction(posemb_version, position=torch.zeros(1, 3)).shape[-1]
        in_features = (n_channels * channel_encoding_channels(posemb_version)
                       + 3 * position_encoding_channels(posemb_version) + direction_features)
        super().__init__(posemb_version, in_features, out_features, stride, **kwargs)

    def forward(self, channels: torch.Tensor, position: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
        """`channels [B, V, n_channels, H, W]`, `position`, `direction [B, V, 3, H, W]`
        -> `[B, V, out_features, H', W']`."""
        if self.posemb_version is None:
            return self._convolve(torch.cat([channels, position, direction], dim=-3))
        encoded_direction = maybe_encode_direction(
            self.posemb_version, position=position.permute(0, 1, 3, 4, 2), direction=direction.permute(0, 1, 3, 4, 2)
        ).permute(0, 1, 4, 2, 3)
        features = _pixel_features(self.posemb_version, channels, position)
        return self._convolve(torch.cat([features, encoded_direction], dim=-3))


class MultiviewPointCloudEmbedding(_MultiviewConv):
    """Per-pixel (colour, ray origin, surface point) features of multiview images, encoded, replaced by
    the learned `unk_token` where `mask` is False, then convolved (docs/behaviour.md#multiview-features)."""

    def __init__(self, posemb_version: Optional[str], n_channels: int, out_features: int, stride: int = 1, **kwargs):
        in_features = (n_channels * channel_encoding_channels(posemb_version)
                       + 6 * position_encoding_channels(posemb_version))
        super().__init__(posemb_version, in_features, out_features, stride, **kwargs)
        self.unk_token = nn.Parameter(torch.empty(self.in_channels, **kwargs))
        nn.init.normal_(self.unk_token, std=0.01)

    def forward(self, channels: torch.Tensor, origin: torch.Tensor, position: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """`channels [B, V, n_channels, H, W]`, `origin`, `position [B, V, 3, H, W]`, `mask [B, V, 1, H, W]`
        bool -> `[B, V, out_features, H', W']`."""
        x = _pixel_features(self.posemb_version, channels, origin, position)
        x = torch.where(mask, x, self.unk_token.view(-1, 1, 1).to(x.dtype))
        return self._convolve(x)
