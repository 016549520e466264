"""Encoders of channel latents (docs/behaviour.md#transmitter-encoder): a point cloud, and optionally
multiview renders, -> `latent_ctx` tokens of `d_latent` channels.

Real home of the official `shap_e.models.transmitter.channels_encoder`. The release's
`PointCloudPerceiverChannelsEncoder`: `latent_ctx` learned query tokens, prefixed by `data_ctx`
point tokens, cross-attend to the dataset(s) of `cross_attention_dataset` (the point cloud, then the
patches of the views), then a self-attention stack; the last `latent_ctx` tokens are projected to
`d_latent` channels. The small models read the points only (`pcl`, no renders needed) and take the
first `data_ctx` farthest-point-ordered points as the prefix (`use_pointconv: false`).

Datasets are read through `DatasetIterator`s: each draws one permutation per batch element (from
`generator`, else the global RNG, in the reference's order: docs/behaviour.md#encoder-randomness) and yields the next
`inner_batch_size` entries; one pass (an "unroll") reads one chunk of every dataset.
"""
import itertools
from abc import abstractmethod
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

from shap_e.models.generation.perceiver import SimplePerceiver
from shap_e.models.generation.transformer import Transformer
from shap_e.models.nn.encoding import MultiviewPointCloudEmbedding, MultiviewPoseEmbedding
from shap_e.models.nn.ops import PointSetEmbedding
from shap_e.models.transmitter.base import ChannelsEncoder, check_options
from shap_e.models.transmitter.batch import (
    alphas_to_tensor, cameras_to_projective, depths_to_tensor, points_of,
)
from shap_e.models.transmitter.point_inputs import (
    DatasetIterator, PointCloudInputs, add_readout, n_unrolls, run_unrolls, sample_fps, sample_pcl_fps,
)
from shap_e.models.transmitter.views import encode_multiview_pcl, patch_tokens
from shap_e.util.collections import AttrDict

__all__ = [
    "DATASETS", "DatasetIterator", "PerceiverChannelsEncoder", "PointCloudPerceiverChannelsEncoder",
    "PointCloudTransformerChannelsEncoder", "TransformerChannelsEncoder", "sample_fps", "sample_pcl_fps",
]

# What the cross-attention reads, and the number of datasets (inner batch sizes) each has.
DATASETS = {"pcl": 1, "multiview": 1, "dense_pose_multiview": 1, "multiview_pcl": 1, "pcl_and_multiview_pcl": 2}


class TransformerChannelsEncoder(ChannelsEncoder):
    """Data tokens (`encode_input`) followed by `latent_ctx` learned tokens through one transformer;
    the last `latent_ctx` outputs are the latent."""

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 param_shapes: Dict[str, Tuple[int]], params_proj: Dict[str, Any], d_latent: int = 512,
                 latent_bottleneck: Optional[Dict[str, Any]] = None, latent_warp: Optional[Dict[str, Any]] = None,
                 n_ctx: int = 1024, width: int = 512, layers: int = 12, heads: int = 8, init_scale: float = 0.25,
                 latent_scale: float = 1.0):
        super().__init__(device=device, param_shapes=param_shapes, params_proj=params_proj, d_latent=d_latent,
                         latent_bottleneck=latent_bottleneck, latent_warp=latent_warp)
        self.width, self.dtype, self.n_ctx, self.latent_scale = width, dtype, n_ctx, latent_scale
        self.backbone = Transformer(device=device, dtype=dtype, n_ctx=n_ctx + self.latent_ctx, width=width,
                                    layers=layers, heads=heads, init_scale=init_scale)
        add_readout(self, width, self.latent_ctx, d_latent)

    @abstractmethod
    def encode_input(self, batch: Any, options: Optional[AttrDict] = None) -> torch.Tensor:
        """`[batch, n_tokens, width]` data tokens."""

    def encode_to_channels(self, batch: Any, options: Optional[AttrDict] = None, *,
                           generator: Optional[torch.Generator] = None) -> torch.Tensor:
        check_options(options)
        h = self.encode_input(batch, options)
        h = torch.cat([h, self.output_tokens[None].expand(len(h), -1, -1)], dim=1)
        h = self.backbone(self.ln_pre(h))
        return self.output_proj(self.ln_post(h[:, -self.latent_ctx :]))


class PointCloudTransformerChannelsEncoder(TransformerChannelsEncoder):
    """Every point is a data token: `input_proj` of its `input_channels` values."""

    def __init__(self, *, input_channels: int = 6, **kwargs: Any):
        super().__init__(**kwargs)
        self.input_channels = input_channels
        self.input_proj = nn.Linear(input_channels, self.width, device=self.device, dtype=self.dtype)

    def encode_input(self, batch: Any, options: Optional[AttrDict] = None) -> torch.Tensor:
        """`batch.points [batch, input_channels, n_points]` -> `[batch, n_points, width]`."""
        return self.input_proj(points_of(batch).permute(0, 2, 1))


class PerceiverChannelsEncoder(ChannelsEncoder):
    # A subclass that sets this draws `output_tokens` itself, after its own input layers.
    DRAWS_TOKENS_LAST = False

    """`data_ctx + latent_ctx` tokens (`get_h_and_iterator`) cross-attend to one chunk of each dataset
    (one `SimplePerceiver` of `xattn_layers` blocks per inner batch size), then self-attend
    (`layers - xattn_layers` blocks), once per unroll; the last `latent_ctx` tokens are the latent.

    In training the number of unrolls is drawn in `[min_unrolls, max_unrolls]` (the same on every
    process); in eval it is `max_unrolls`.
    """

    def __init__(self, *, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None,
                 param_shapes: Dict[str, Tuple[int]], params_proj: Dict[str, Any], min_unrolls: int = 1,
                 max_unrolls: int = 1, d_latent: int = 512, latent_bottleneck: Optional[Dict[str, Any]] = None,
                 latent_warp: Optional[Dict[str, Any]] = None, width: int = 512, layers: int = 12,
                 xattn_layers: int = 1, heads: int = 8, init_scale: float = 0.25,
                 inner_batch_size: Union[int, List[int]] = 1, data_ctx: int = 1):
        super().__init__(device=device, param_shapes=param_shapes, params_proj=params_proj, d_latent=d_latent,
                         latent_bottleneck=latent_bottleneck, latent_warp=latent_warp)
        if not 1 <= min_unrolls <= max_unrolls:
            raise ValueError(f"need 1 <= min_unrolls <= max_unrolls, got {min_unrolls}, {max_unrolls}")
        if not 0 <= xattn_layers <= layers:
            raise ValueError(f"xattn_layers={xattn_layers} must be in [0, layers={layers}]")
        self.width, self.dtype, self.data_ctx = width, dtype, data_ctx
        self.min_unrolls, self.max_unrolls = min_unrolls, max_unrolls
        sizes = (inner_batch_size,) if isinstance(inner_batch_size, int) else tuple(inner_batch_size)
        self.inner_batch_size = tuple(int(size) for size in sizes)
        n_ctx = data_ctx + self.latent_ctx
        self.encoder = nn.ModuleList(
            SimplePerceiver(device=device, dtype=dtype, n_ctx=n_ctx, n_data=size, width=width, layers=xattn_layers,
                            heads=heads, init_scale=init_scale)
            for size in self.inner_batch_size
        )
        self.processor = Transformer(device=device, dtype=dtype, n_ctx=n_ctx, layers=layers - xattn_layers,
                                     width=width, heads=heads, init_scale=init_scale)
        add_readout(self, width, self.latent_ctx, d_latent, draw_tokens=not self.DRAWS_TOKENS_LAST)

    @abstractmethod
    def get_h_and_iterator(self, batch: Any, options: Optional[AttrDict] = None, *,
                           generator: Optional[torch.Generator] = None) -> Tuple[torch.Tensor, Iterator]:
        """The initial tokens `[batch, data_ctx + latent_ctx, width]` (after `ln_pre`), and an iterator
        yielding, per unroll, one `[batch, n_data, width]` chunk per dataset (a tuple for several)."""

    def encode_to_channels(self, batch: Any, options: Optional[AttrDict] = None, *,
                           generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """`[batch, latent_ctx, d_latent]` before the bottleneck."""
        check_options(options)
        h, it = self.get_h_and_iterator(batch, options, generator=generator)
        h = run_unrolls(self.encoder, self.processor, h, it, self.get_n_unrolls(generator))
        return self.output_proj(self.ln_post(h[:, -self.latent_ctx :]))

    def get_n_unrolls(self, generator: Optional[torch.Generator] = None) -> int:
        return n_unrolls(self, generator)


class PointCloudPerceiverChannelsEncoder(PointCloudInputs, PerceiverChannelsEncoder):
    """The release's encoder (docs/behaviour.md#transmitter-encoder); see the module docstring.

    Its layers draw their random initial values in the order the package always used (the query
    tokens last), so that a seeded training run gives the same weights.

    cross_attention_dataset: `pcl` (points), `multiview` (patches of the views, modulated by their
        cameras), `dense_pose_multiview` (patches of the views with every pixel's ray),
        `multiview_pcl` (the views as point clouds) or `pcl_and_multiview_pcl` (points and views as
        point clouds: the release).
    fps_method: `first` (the points come in farthest-point order) or `fps` (sample them here).
    pos_emb: None (raw point channels) or `nerf` (NeRF encoding, degrees 0..14) before `input_proj`.
    use_pointconv: data tokens from point convolutions around the first `data_ctx` points, instead of
        the projected points themselves.
    """

    DRAWS_TOKENS_LAST = True

    def __init__(self, *, cross_attention_dataset: str = "pcl", fps_method: str = "fps", input_channels: int = 6,
                 pos_emb: Optional[str] = None, image_size: int = 256, patch_size: int = 32, pose_dropout: float = 0.0,
                 use_depth: bool = False, max_depth: float = 5.0, pointconv_radius: float = 0.5,
                 pointconv_samples: int = 32, pointconv_hidden: Optional[List[int]] = None,
                 pointconv_patch_size: int = 1, pointconv_stride: int = 1, pointconv_padding_mode: str = "zeros",
                 use_pointconv: bool = False, **kwargs: Any):
        _check_dataset_options(cross_attention_dataset, use_depth, kwargs.get("inner_batch_size", 1))
        super().__init__(**kwargs)
        self.cross_attention_dataset, self.use_pointconv = cross_attention_dataset, use_pointconv
        self.init_inputs(fps_method=fps_method, input_channels=input_channels, pos_emb=pos_emb, image_size=image_size,
                         patch_size=patch_size, pose_dropout=pose_dropout, use_depth=use_depth, max_depth=max_depth)
        if use_pointconv:
            hidden = [self.width] if pointconv_hidden is None else list(pointconv_hidden)
            if hidden[-1] != self.width:
                raise ValueError(f"pointconv_hidden[-1]={hidden[-1]} must equal width={self.width}")
            self.point_conv = PointSetEmbedding(
                radius=pointconv_radius, n_point=self.data_ctx, n_sample=pointconv_samples, d_input=self.width,
                d_hidden=hidden, patch_size=pointconv_patch_size, stride=pointconv_stride,
                padding_mode=pointconv_padding_mode, fps_method=fps_method, device=self.device, dtype=self.dtype,
            )
        if cross_attention_dataset == "multiview":
            self.init_multiview_patches(self.inner_batch_size[0])
        elif self.use_views:
            self._init_pixel_embedding(cross_attention_dataset, use_depth)
        nn.init.normal_(self.output_tokens)

    def _init_pixel_embedding(self, dataset: str, use_depth: bool) -> None:
        """The per-pixel embedding of the views (3x3 conv to `width / 2` channels) and `patch_emb`."""
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size={self.image_size} must be a multiple of patch_size={self.patch_size}")
        half, device, dtype = self.width // 2, self.device, self.dtype
        if dataset == "dense_pose_multiview":
            self.mv_pose_embed = MultiviewPoseEmbedding("nerf", 4 if use_depth else 3, half, device=device, dtype=dtype)
        else:
            self.mv_pcl_embed = MultiviewPointCloudEmbedding("nerf", 3, half, device=device, dtype=dtype)
        self.patch_emb = nn.Conv2d(half, self.width, self.patch_size, stride=self.patch_size, device=device,
                                   dtype=dtype)

    @property
    def use_views(self) -> bool:
        """Whether the encoder reads renders (views, depths, alphas, cameras) besides the points."""
        return self.cross_attention_dataset != "pcl"

    def batch_options(self) -> Dict[str, Any]:
        """What `load_or_create_multimodal_batch` must produce for this encoder: the point count,
        and the views only when the encoder reads them."""
        if not self.use_views:
            return dict(point_count=self.inner_batch_size[0], mv_light_mode=None)
        with_points = self.cross_attention_dataset == "pcl_and_multiview_pcl"
        return dict(point_count=self.inner_batch_size[0] if with_points else self.data_ctx, mv_light_mode="basic",
                    mv_num_views=self.inner_batch_size[-1], mv_image_size=self.image_size)

    def raw_depths_to_tensor(self, depths: Any) -> torch.Tensor:
        """`[batch, n_views, 1, image_size, image_size]` z-depths clamped to `max_depth`."""
        return depths_to_tensor(depths, self.image_size, self.max_depth)

    def view_alphas_to_tensor(self, view_alphas: Any) -> torch.Tensor:
        """`[batch, n_views, 1, image_size, image_size]` in [0, 1]."""
        return alphas_to_tensor(view_alphas, self.image_size)

    def dense_pose_cameras_to_tensor(self, cameras: Any) -> Tuple[torch.Tensor, torch.Tensor]:
        """(`[batch, n_views, height, width, 2, 3]` per-pixel ray origins and unit directions,
        `[batch, n_views, 3]` camera z axes)."""
        cams = cameras_to_projective(cameras)
        rays = cams.rays().view(*cams.shape, cams.height, cams.width, 2, 3)
        return rays, cams.z.view(*cams.shape, 3)

    def get_h_and_iterator(self, batch: Any, options: Optional[AttrDict] = None, *,
                           generator: Optional[torch.Generator] = None) -> Tuple[torch.Tensor, Iterator]:
        batch = self.as_batch(batch)
        h = self.initial_tokens(batch, generator)
        datasets = {"pcl": self.get_pcl_dataset, "multiview": self.get_multiview_dataset,
                    "dense_pose_multiview": self.get_dense_pose_multiview_dataset,
                    "multiview_pcl": self.get_multiview_pcl_dataset,
                    "pcl_and_multiview_pcl": self.get_pcl_and_multiview_pcl_dataset}
        return h, datasets[self.cross_attention_dataset](batch, options, generator=generator)

    def get_dense_pose_multiview_dataset(self, batch: Any, options: Optional[AttrDict] = None,
                                         inner_batch_size: Optional[int] = None, *,
                                         generator: Optional[torch.Generator] = None) -> Iterator[torch.Tensor]:
        """Chunks `[batch, inner_batch_size * n_patches, width]` of dense-pose view patches."""
        tokens = self.encode_dense_pose_views(batch)
        size = self.inner_batch_size[0] if inner_batch_size is None else inner_batch_size
        it = iter(DatasetIterator(tokens, size, generator))
        return (next(it).reshape(len(tokens), -1, self.width) for _ in itertools.count())

    def encode_dense_pose_views(self, batch: Any) -> torch.Tensor:
        """`[batch, n_views, n_patches, width]`: patches of per-pixel (colour, depth with `use_depth`,
        ray origin, ray direction) features."""
        batch = self.as_batch(batch)
        images = self.view_images(batch)
        rays, _ = self.dense_pose_cameras_to_tensor(batch.cameras)
        rays = rays.to(images).permute(0, 1, 4, 5, 2, 3)  # [batch, n_views, 2, 3, S, S]
        pixels = self.mv_pose_embed(images, rays[:, :, 0], rays[:, :, 1])
        n_batch, n_views = pixels.shape[:2]
        tokens = patch_tokens(pixels.flatten(0, 1), self.patch_emb)
        return tokens.view(n_batch, n_views, *tokens.shape[1:])

    def get_multiview_pcl_dataset(self, batch: Any, options: Optional[AttrDict] = None,
                                  inner_batch_size: Optional[int] = None, use_distance: bool = True, *,
                                  generator: Optional[torch.Generator] = None) -> Iterator[torch.Tensor]:
        """Chunks `[batch, inner_batch_size * n_patches, width]` of multiview point-cloud patches."""
        tokens = self.encode_multiview_pcl(batch, use_distance=use_distance)
        size = self.inner_batch_size[0] if inner_batch_size is None else inner_batch_size
        it = iter(DatasetIterator(tokens, size, generator))
        return (next(it).reshape(len(tokens), -1, self.width) for _ in itertools.count())

    def get_pcl_and_multiview_pcl_dataset(self, batch: Any, options: Optional[AttrDict] = None,
                                          use_distance: bool = True, *,
                                          generator: Optional[torch.Generator] = None) -> Iterator[Tuple]:
        """Pairs (points chunk, multiview point-cloud chunk), as the two datasets above."""
        batch = self.as_batch(batch)
        points = self.get_pcl_dataset(batch, options, self.inner_batch_size[0], generator=generator)
        views = self.get_multiview_pcl_dataset(batch, options, self.inner_batch_size[1], use_distance,
                                               generator=generator)
        return ((next(points), next(views)) for _ in itertools.count())

    def encode_multiview_pcl(self, batch: Any, use_distance: bool = True) -> torch.Tensor:
        """`[batch, n_views, n_patches, width]` multiview point-cloud tokens (docs/behaviour.md#multiview-features)."""
        return encode_multiview_pcl(self.as_batch(batch), self.mv_pcl_embed, self.patch_emb, self.image_size,
                                    self.max_depth, use_distance)


def _check_dataset_options(dataset: str, use_depth: bool, inner_batch_size: Union[int, Sequence[int]]) -> None:
    """Raise a ValueError naming the option when `PointCloudPerceiverChannelsEncoder` options do not fit."""
    if dataset not in DATASETS:
        raise ValueError(f"cross_attention_dataset={dataset!r} is unknown; valid: {sorted(DATASETS)}")
    if "multiview_pcl" in dataset and not use_depth:
        raise ValueError(f"cross_attention_dataset={dataset!r} places pixels by their depth; it needs use_depth=True")
    sizes = (inner_batch_size,) if isinstance(inner_batch_size, int) else tuple(inner_batch_size)
    if len(sizes) != DATASETS[dataset]:
        raise ValueError(f"cross_attention_dataset={dataset!r} reads {DATASETS[dataset]} dataset(s); give as many "
                         f"inner_batch_size values, got {list(sizes)}")
