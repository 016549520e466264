"""Official module path `shap_e.models.nerf.renderer`: NeRF renderers of `NeRFModel`s (one pass of
stratified samples, or a coarse pass and an importance-sampled fine pass), as `RayRenderer`s with
AttrDict batches and outputs. They assemble `shap_e.models.nerf.ray`'s integrals; `render_views`
comes from `RayRenderer`.

An optional `outer_volume` with its own background model is rendered after the foreground volume
(e.g. an unbounded shell around the object's box); `void_model` is seen beyond both.
"""
from functools import partial
from typing import Any, Dict, Optional

import torch

from shap_e.models.nerf.model import NeRFModel
from shap_e.models.nerf.ray import RayVolumeIntegral, StratifiedRaySampler, render_rays
from shap_e.models.nn.meta import subdict
from shap_e.models.ray_renderer import RayRenderer
from shap_e.models.volume import Volume
from shap_e.util.collections import AttrDict

__all__ = ["OneStepNeRFRenderer", "TwoStepNeRFRenderer"]


def _options(options: Optional[Dict], **defaults) -> AttrDict:
    options = AttrDict() if options is None else AttrDict(options)
    for key, value in defaults.items():
        options.setdefault(key, value)
    return options


def _bound(module: Optional[NeRFModel], name: str, params: AttrDict, options: AttrDict):
    """`module` with its share of `params` (under `name.`) and the options bound, or None."""
    if module is None:
        return None
    return partial(module, params=subdict(params, name), options=options)


class OneStepNeRFRenderer(RayRenderer):
    """`n_samples` stratified samples per ray through `volume` (and `outer_volume`), then the void."""

    def __init__(
        self,
        n_samples: int,
        void_model: NeRFModel,
        foreground_model: NeRFModel,
        volume: Volume,
        background_model: Optional[NeRFModel] = None,
        outer_volume: Optional[Volume] = None,
        foreground_stratified_depth_sampling_mode: str = "linear",
        background_stratified_depth_sampling_mode: str = "linear",
        channel_scale: float = 255,
        device: Optional[torch.device] = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if (background_model is None) != (outer_volume is None):
            raise ValueError("pass background_model and outer_volume together (or neither)")
        self.n_samples = n_samples
        self.void_model, self.foreground_model, self.background_model = void_model, foreground_model, background_model
        self.volume, self.outer_volume = volume, outer_volume
        self.foreground_sampler = StratifiedRaySampler(foreground_stratified_depth_sampling_mode)
        self.background_sampler = StratifiedRaySampler(background_stratified_depth_sampling_mode)
        self.channel_scale = channel_scale
        self.to(device)

    def render_rays(self, batch: AttrDict, params: Optional[Dict] = None, options: Optional[Dict] = None) -> AttrDict:
        """`batch.rays [batch, n_rays, 2, 3]` -> AttrDict of `channels` (x channel_scale), `distances`,
        `transmittance`, `t0`, `t1`, `intersected` `[batch, n_rays, .]` and `aux_losses`.

        options: `render_background` (default True: the outer volume is rendered),
        `render_with_direction` (default True), `n_samples`.
        """
        params = self.update(params)
        options = _options(options, render_background=True, render_with_direction=True, n_samples=self.n_samples)
        parts = [RayVolumeIntegral(_bound(self.foreground_model, "foreground_model", params, options), self.volume,
                                   self.foreground_sampler, options.n_samples)]
        if options.render_background and self.outer_volume is not None:
            parts.append(RayVolumeIntegral(_bound(self.background_model, "background_model", params, options),
                                           self.outer_volume, self.background_sampler, options.n_samples))
        void = _bound(self.void_model, "void_model", params, options)
        results, _, _ = render_rays(AttrDict(batch).rays, parts, void, render_with_direction=options.render_with_direction)
        return AttrDict(
            channels=results.output.channels * self.channel_scale, distances=results.output.distances,
            transmittance=results.transmittance, t0=results.volume_range.t0, t1=results.volume_range.t1,
            intersected=results.volume_range.intersected, aux_losses=results.output.aux_losses,
        )


class TwoStepNeRFRenderer(RayRenderer):
    """A coarse pass (`n_coarse_samples` stratified samples) and a fine pass (`n_fine_samples` more
    where the coarse weights are, plus the coarse ones), as NeRF (Mildenhall et al. 2020, sec. 5.2).

    Without a `coarse_model` the fine model serves both passes and the fine pass reuses the coarse
    samples' outputs; with one, the fine model evaluates the coarse samples again.
    """

    def __init__(
        self,
        n_coarse_samples: int,
        n_fine_samples: int,
        void_model: NeRFModel,
        fine_model: NeRFModel,
        volume: Volume,
        coarse_model: Optional[NeRFModel] = None,
        coarse_background_model: Optional[NeRFModel] = None,
        fine_background_model: Optional[NeRFModel] = None,
        outer_volume: Optional[Volume] = None,
        foreground_stratified_depth_sampling_mode: str = "linear",
        background_stratified_depth_sampling_mode: str = "linear",
        importance_sampling_options: Optional[Dict[str, Any]] = None,
        channel_scale: float = 255,
        device: Optional[torch.device] = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if (fine_background_model is None) != (outer_volume is None):
            raise ValueError("pass fine_background_model and outer_volume together (or neither)")
        if coarse_background_model is not None and fine_background_model is None:
            raise ValueError("coarse_background_model needs a fine_background_model")
        self.shared = coarse_model is None
        self.n_coarse_samples, self.n_fine_samples = n_coarse_samples, n_fine_samples
        self.void_model, self.fine_model, self.coarse_model = void_model, fine_model, coarse_model
        self.fine_background_model, self.coarse_background_model = fine_background_model, coarse_background_model
        self.volume, self.outer_volume = volume, outer_volume
        self.foreground_sampler = StratifiedRaySampler(foreground_stratified_depth_sampling_mode)
        self.background_sampler = StratifiedRaySampler(background_stratified_depth_sampling_mode)
        self.importance_sampling_options = AttrDict(importance_sampling_options or {})
        self.channel_scale = channel_scale
        self.to(device)

    def render_rays(self, batch: AttrDict, params: Optional[Dict] = None, options: Optional[Dict] = None) -> AttrDict:
        """`batch.rays [batch, n_rays, 2, 3]` -> AttrDict of the fine pass's `channels` (x channel_scale),
        `distances`, `transmittance`, `t0`, `t1`, `intersected`, the coarse pass's `channels_coarse`,
        `distances_coarse`, `transmittance_coarse`, and `aux_losses` (coarse ones suffixed `_coarse`).

        options: `render_background`, `render_with_direction` (default True both),
        `n_coarse_samples`, `n_fine_samples`, `importance_sampling_options` (`alpha`, `blur_pool`).
        """
        params = self.update(params)
        options = _options(options, render_background=True, render_with_direction=True,
                           n_coarse_samples=self.n_coarse_samples, n_fine_samples=self.n_fine_samples,
                           importance_sampling_options=self.importance_sampling_options)
        fine = _bound(self.fine_model, "fine_model", params, options)
        coarse = fine if self.shared else _bound(self.coarse_model, "coarse_model", params, options)
        fine_bg = _bound(self.fine_background_model, "fine_background_model", params, options)
        coarse_bg = _bound(self.coarse_background_model, "coarse_background_model", params, options) or fine_bg
        background = options.render_background and self.outer_volume is not None
        void = _bound(self.void_model, "void_model", params, options)
        rays = AttrDict(batch).rays

        parts = [RayVolumeIntegral(coarse, self.volume, self.foreground_sampler, options.n_coarse_samples)]
        if background:
            parts.append(RayVolumeIntegral(coarse_bg, self.outer_volume, self.background_sampler, options.n_coarse_samples))
        coarse_results, samplers, coarse_raw = render_rays(
            rays, parts, void, render_with_direction=options.render_with_direction,
            importance_sampling_options=options.importance_sampling_options,
        )
        parts = [RayVolumeIntegral(fine, self.volume, samplers[0], options.n_fine_samples)]
        if background:
            parts.append(RayVolumeIntegral(fine_bg, self.outer_volume, samplers[1], options.n_fine_samples))
        fine_results, _, _ = render_rays(rays, parts, void, shared=self.shared, prev_raw_outputs=coarse_raw,
                                         render_with_direction=options.render_with_direction)
        aux_losses = AttrDict(fine_results.output.aux_losses)
        for name, loss in coarse_results.output.aux_losses.items():
            aux_losses[f"{name}_coarse"] = loss
        return AttrDict(
            channels=fine_results.output.channels * self.channel_scale,
            channels_coarse=coarse_results.output.channels * self.channel_scale,
            distances=fine_results.output.distances, distances_coarse=coarse_results.output.distances,
            transmittance=fine_results.transmittance, transmittance_coarse=coarse_results.transmittance,
            t0=fine_results.volume_range.t0, t1=fine_results.volume_range.t1,
            intersected=fine_results.volume_range.intersected, aux_losses=aux_losses,
        )
