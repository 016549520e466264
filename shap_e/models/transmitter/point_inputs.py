"""What the transmitter encoders share: the datasets they read (`DatasetIterator`), farthest-point
subsets, the conversion of the official batch, the point tokens, the plain multiview patches and the
learned-query read-out.

`DatasetIterator`, `sample_pcl_fps` and `sample_fps` are the official names of
`shap_e.models.transmitter.channels_encoder` (re-exported there). `PointCloudInputs` holds the
methods the official `PointCloudPerceiverChannelsEncoder` and `PointCloudPerceiverEncoder` both have.
"""
import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

from shap_e.models.nn.encoding import PosEmbLinear
from shap_e.models.transmitter.batch import (
    MultimodalBatch, as_multimodal_batch, camera_vectors, depths_to_tensor, normalise_depths, views_to_tensor,
)
from shap_e.models.transmitter.views import encode_views
from shap_e.util.collections import AttrDict
from shap_e.util.rng import draw_device

__all__ = [
    "POS_EMBS", "DatasetIterator", "PointCloudInputs", "ViewInputs", "add_readout", "n_unrolls", "run_unrolls",
    "sample_fps", "sample_pcl_fps",
]

POS_EMBS = (None, "nerf", "v1")


@dataclass
class DatasetIterator:
    """Endless chunks `[batch, batch_size, ...]` of `embs [batch, dataset_size, ...]`, reshuffled
    (one `randperm` per element) whenever the remaining entries do not fill a chunk."""

    embs: torch.Tensor
    batch_size: int
    generator: Optional[torch.Generator] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not 0 < self.batch_size <= self.embs.shape[1]:
            raise ValueError(f"batch_size={self.batch_size} must be in [1, {self.embs.shape[1]}] (the dataset size)")

    def __iter__(self) -> "DatasetIterator":
        self._reset()
        return self

    def __next__(self) -> torch.Tensor:
        if self.idx + self.batch_size > self.embs.shape[1]:
            self._reset()
        start, self.idx = self.idx, self.idx + self.batch_size
        return self.embs[:, start : self.idx]

    def _reset(self) -> None:
        n_batch, size = self.embs.shape[:2]
        on = draw_device(self.generator, self.embs.device)
        index = torch.stack([torch.randperm(size, generator=self.generator, device=on) for _ in range(n_batch)])
        index = index.to(self.embs.device).view(n_batch, size, *([1] * (self.embs.dim() - 2)))
        self.embs = torch.gather(self.embs, 1, index.expand_as(self.embs))
        self.idx = 0


def sample_pcl_fps(points: torch.Tensor, data_ctx: int, method: str = "fps") -> torch.Tensor:
    """`[batch, n_points, channels]` -> `[batch, min(n_points, data_ctx), channels]`: a farthest-point
    subset (`fps`), or the first `data_ctx` points of clouds already in farthest-point order (`first`)."""
    if method not in ("fps", "first"):
        raise ValueError(f"unsupported farthest-point sampling method {method!r}; valid: ['first', 'fps']")
    if points.shape[1] <= data_ctx:
        return points
    if method == "first":
        return points[:, :data_ctx]
    return torch.cat([sample_fps(row[None], data_ctx) for row in points]).to(points.device)


def sample_fps(example: torch.Tensor, n_samples: int) -> torch.Tensor:
    """`[1, n_points, 3 + channels]` -> `[1, n_samples, 3 + channels]`: farthest-point sampling of the
    coordinates (of a random subset of at most 32768 points) keeping every point's channels."""
    from shap_e.rendering.point_cloud import PointCloud

    if example.dim() != 3 or len(example) != 1 or example.shape[2] < 3 or not 0 < n_samples <= example.shape[1]:
        raise ValueError(f"example must be [1, n_points, 3 + channels] with n_points >= n_samples={n_samples}, "
                         f"got {list(example.shape)}")
    points = example[0].detach().cpu().numpy()
    cloud = PointCloud(coords=points[:, :3], channels={str(i): points[:, 3 + i] for i in range(points.shape[1] - 3)})
    sampled = cloud.random_sample(min(32768, len(points))).farthest_point_sample(n_samples)
    channels = [sampled.channels[str(i)][:, None] for i in range(points.shape[1] - 3)]
    return torch.from_numpy(np.concatenate([sampled.coords, *channels], axis=1)).to(example.dtype)[None]


class ViewInputs:
    """The official batch conversions (`views_to_tensor`, ...) of the encoders that read renders;
    they read `image_size`, `max_depth` and `use_depth`."""

    def as_batch(self, batch: Any) -> MultimodalBatch:
        """A `MultimodalBatch` of `batch` (an official `AttrDict` is converted once,
        docs/behaviour.md#multiview-features)."""
        return as_multimodal_batch(batch, self.image_size, self.max_depth)

    def view_images(self, batch: MultimodalBatch) -> torch.Tensor:
        """`[batch, n_views, 3 (+1 with use_depth), S, S]`: the views, and with `use_depth` their depths
        clamped to `max_depth` and mapped to [-1, 1] as a fourth channel."""
        if batch.views is None or batch.cameras is None or (self.use_depth and batch.depths is None):
            raise ValueError("the batch needs views and cameras (and depths with use_depth) for this encoder")
        if not self.use_depth:
            return batch.views
        return torch.cat([batch.views, normalise_depths(batch.depths, self.max_depth)], dim=2)

    def views_to_tensor(self, views: Any) -> torch.Tensor:
        """`[batch, n_views, 3, image_size, image_size]` in [-1, 1]."""
        return views_to_tensor(views, self.image_size)

    def depths_to_tensor(self, depths: Any) -> torch.Tensor:
        """`[batch, n_views, 1, image_size, image_size]` depths mapped from `[0, max_depth]` to `[-1, 1]`."""
        return depths_to_tensor(depths, self.image_size, self.max_depth, normalise=True)

    def cameras_to_tensor(self, cameras: Any) -> torch.Tensor:
        """`[batch, n_views, 13]`: x, y, z, origin and x_fov of each camera."""
        return camera_vectors(cameras)


class PointCloudInputs(ViewInputs):
    """Methods of the point-cloud perceiver encoders. `init_inputs` sets the attributes they read and
    builds `input_proj`; `init_multiview_patches` builds the modules of the `multiview` dataset."""

    def init_inputs(self, *, fps_method: str, input_channels: int, pos_emb: Optional[str], image_size: int,
                    patch_size: int, pose_dropout: float, use_depth: bool, max_depth: float) -> None:
        if fps_method not in ("fps", "first"):
            raise ValueError(f"fps_method={fps_method!r} is unknown; valid: ['first', 'fps']")
        if pos_emb not in POS_EMBS:
            raise ValueError(f"pos_emb={pos_emb!r} is unknown; valid: {list(POS_EMBS)}")
        self.fps_method, self.input_channels = fps_method, input_channels
        self.image_size, self.patch_size, self.pose_dropout = image_size, patch_size, pose_dropout
        self.use_depth, self.max_depth = use_depth, max_depth
        self.input_proj = PosEmbLinear(pos_emb, input_channels, self.width, device=self.device, dtype=self.dtype)

    def init_multiview_patches(self, n_views: int) -> None:
        """`pos_emb` (one per patch of `n_views` views), `patch_emb` (colours, and depth with
        `use_depth`) and `camera_emb` (13 camera numbers -> a scale and shift per channel)."""
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size={self.image_size} must be a multiple of patch_size={self.patch_size}")
        device, dtype, width = self.device, self.dtype, self.width
        n_patches = (self.image_size // self.patch_size) ** 2
        self.pos_emb = nn.Parameter(torch.empty(n_patches * n_views, width, device=device, dtype=dtype))
        nn.init.normal_(self.pos_emb)
        self.patch_emb = nn.Conv2d(4 if self.use_depth else 3, width, self.patch_size, stride=self.patch_size,
                                   device=device, dtype=dtype)
        self.camera_emb = nn.Sequential(nn.Linear(13, width, device=device, dtype=dtype), nn.GELU(),
                                        nn.Linear(width, 2 * width, device=device, dtype=dtype))

    def project_points(self, points: torch.Tensor) -> torch.Tensor:
        """`[batch, n_points, input_channels]` -> `[batch, n_points, width]` (encoded by `pos_emb`, projected)."""
        return self.input_proj(points)

    def sample_pcl_fps(self, points: torch.Tensor) -> torch.Tensor:
        """`[batch, n_points, channels]` -> the first `data_ctx` points in farthest-point order."""
        return sample_pcl_fps(points, data_ctx=self.data_ctx, method=self.fps_method)

    def initial_tokens(self, batch: MultimodalBatch, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """`[batch, data_ctx + latent_ctx, width]` after `ln_pre`: the data tokens (point convolutions
        around the first `data_ctx` points with `use_pointconv`, else those points projected), then
        the learned query tokens."""
        points = batch.points.permute(0, 2, 1)  # [batch, n_points, channels]
        if points.shape[1] < self.data_ctx:
            raise ValueError(f"the batch has {points.shape[1]} points; this encoder needs at least data_ctx="
                             f"{self.data_ctx}")
        if getattr(self, "use_pointconv", False):
            features = self.project_points(points).permute(0, 2, 1)
            data_tokens = self.point_conv(batch.points[:, :3], features, generator).permute(0, 2, 1)
        else:
            data_tokens = self.project_points(self.sample_pcl_fps(points))
        queries = self.output_tokens[None].expand(len(points), -1, -1)
        return self.ln_pre(torch.cat([data_tokens, queries.to(data_tokens.dtype)], dim=1))

    def get_pcl_dataset(self, batch: Any, options: Optional[AttrDict] = None,
                        inner_batch_size: Optional[int] = None, *,
                        generator: Optional[torch.Generator] = None) -> Iterator[torch.Tensor]:
        """Chunks `[batch, inner_batch_size, width]` of the projected points."""
        points = self.as_batch(batch).points.permute(0, 2, 1)
        size = self.inner_batch_size[0] if inner_batch_size is None else inner_batch_size
        return iter(DatasetIterator(self.project_points(points), size, generator))

    def get_multiview_dataset(self, batch: Any, options: Optional[AttrDict] = None,
                              inner_batch_size: Optional[int] = None, *,
                              generator: Optional[torch.Generator] = None) -> Iterator[torch.Tensor]:
        """Chunks `[batch, inner_batch_size * n_patches, width]` of camera-modulated view patches, plus `pos_emb`."""
        tokens = self.encode_views(batch, generator=generator)
        size = self.inner_batch_size[0] if inner_batch_size is None else inner_batch_size
        it = iter(DatasetIterator(tokens, size, generator))
        return (next(it).reshape(len(tokens), -1, self.width) + self.pos_emb for _ in itertools.count())

    def encode_views(self, batch: Any, *, generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """`[batch, n_views, n_patches, width]`: patches of the views (and normalised depths with
        `use_depth`), scaled and shifted by their cameras' embedding."""
        batch = self.as_batch(batch)
        images = self.view_images(batch)
        dropout = self.pose_dropout if self.training else 0.0
        return encode_views(images, camera_vectors(batch.cameras), self.patch_emb, self.camera_emb, dropout, generator)


def add_readout(module: nn.Module, width: int, latent_ctx: int, out_features: int, draw_tokens: bool = True) -> None:
    """`ln_pre`, `ln_post`, the `latent_ctx` learned query tokens `output_tokens` (N(0, 1)) and
    `output_proj` (width -> out_features) of a perceiver or transformer encoder. With
    `draw_tokens=False` the tokens are left for the caller to draw (`nn.init.normal_`) later."""
    device, dtype = module.device, module.dtype
    module.ln_pre = nn.LayerNorm(width, device=device, dtype=dtype)
    module.ln_post = nn.LayerNorm(width, device=device, dtype=dtype)
    module.output_tokens = nn.Parameter(torch.empty(latent_ctx, width, device=device, dtype=dtype))
    if draw_tokens:
        nn.init.normal_(module.output_tokens)
    module.output_proj = nn.Linear(width, out_features, device=device, dtype=dtype)


def n_unrolls(module: nn.Module, generator: Optional[torch.Generator] = None) -> int:
    """`module.max_unrolls` in eval; in training a draw in `[min_unrolls, max_unrolls]`, the same on every process."""
    if not module.training or module.min_unrolls == module.max_unrolls:
        return module.max_unrolls
    device = module.output_tokens.device
    n = torch.randint(module.min_unrolls, module.max_unrolls + 1, (), generator=generator,
                      device=draw_device(generator, device))
    if dist.is_available() and dist.is_initialized():
        n = n.to(device)
        dist.broadcast(n, 0)
    return int(n)


def run_unrolls(encoders: Sequence[nn.Module], processor: nn.Module, h: torch.Tensor, it: Iterator,
                n_unrolls: int) -> torch.Tensor:
    """`n_unrolls` passes of: each cross-attention stack reads its dataset's next chunk, then `processor`."""
    for _ in range(n_unrolls):
        data = next(it)
        for encoder, chunk in zip(encoders, data if isinstance(data, tuple) else (data,)):
            h = encoder(h, chunk)
        h = processor(h)
    return h
