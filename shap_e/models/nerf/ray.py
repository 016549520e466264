"""Official module path `shap_e.models.nerf.ray`: volume rendering of NeRF models along rays, with
AttrDict outputs, over one or more nested volumes.

An adapter: the stratified and importance samples and the quadrature are those of
`shap_e.rendering.nerf` (`stratified_samples`, `importance_samples`, `integrate_samples`), the
ranges `shap_e.models.volume.VolumeRange`. Random numbers come from torch's global RNG, in the
official order (per part: the stratified draw; per importance pass: the index then the jitter draw).
"""
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch

from shap_e.models.nerf.model import NeRFModel
from shap_e.models.query import Query
from shap_e.models.volume import Volume, VolumeRange
from shap_e.rendering.nerf import importance_samples, integrate_samples, stratified_samples
from shap_e.util.collections import AttrDict

__all__ = [
    "ImportanceRaySampler",
    "RaySampler",
    "RayVolumeIntegral",
    "RayVolumeIntegralResults",
    "StratifiedRaySampler",
    "render_rays",
]

# raw keys that are not integrated as they are
_NOT_INTEGRATED = ("density", "ts", "weights", "aux_losses", "no_weight_grad_aux_losses")


class RaySampler(ABC):
    """Chooses the distances along each ray at which a model is evaluated."""

    @abstractmethod
    def sample(self, t0: torch.Tensor, t1: torch.Tensor, n_samples: int) -> torch.Tensor:
        """Sorted ts `[batch, ..., n_samples, 1]` within `[t0, t1]` (`[batch, ..., 1]` each)."""


class StratifiedRaySampler(RaySampler):
    """One jittered sample per stratum, strata equal in t, log t or 1 / t (`depth_mode`:
    "linear", "geometric", "harmonic")."""

    def __init__(self, depth_mode: str = "linear"):
        self.depth_mode = depth_mode
        stratified_samples(_range(torch.zeros(1, 1), torch.ones(1, 1)), 1, depth_mode=depth_mode)  # checks the mode

    def sample(self, t0: torch.Tensor, t1: torch.Tensor, n_samples: int, epsilon: float = 1e-3) -> torch.Tensor:
        return stratified_samples(_range(t0, t1), n_samples, depth_mode=self.depth_mode, epsilon=epsilon)


class ImportanceRaySampler(RaySampler):
    """Samples where an earlier pass found weight: inverse CDF of `raw.weights + alpha` over the
    intervals around `raw.ts` (`blur_pool`: max over neighbours, then a 2-tap mean, first)."""

    def __init__(self, volume_range: VolumeRange, raw: AttrDict, blur_pool: bool = False, alpha: float = 1e-5):
        self.volume_range = volume_range
        self.ts = raw["ts"].clone()
        self.weights = raw["weights"].clone()
        self.blur_pool = blur_pool
        self.alpha = alpha

    def sample(self, t0: torch.Tensor, t1: torch.Tensor, n_samples: int) -> torch.Tensor:
        """`t0`, `t1` are not used: the intervals are those of the earlier pass."""
        weights = self.weights
        if self.blur_pool:
            padded = torch.cat([weights[..., :1, :], weights, weights[..., -1:, :]], dim=-2)
            maxes = torch.maximum(padded[..., :-1, :], padded[..., 1:, :])
            weights = 0.5 * (maxes[..., :-1, :] + maxes[..., 1:, :])
        return importance_samples(_range(self.volume_range.t0, self.volume_range.t1), self.ts, weights, n_samples,
                                  alpha=self.alpha)


@dataclass
class RayVolumeIntegralResults:
    """The integral over one volume (or consecutive ones): `output` (integrated channels,
    distances, other raw keys, `aux_losses`), the model's `raw` samples, the `volume_range` and the
    `transmittance [batch, ..., 1]` left at its far end."""

    output: AttrDict
    raw: Optional[AttrDict] = None
    volume_range: Optional[VolumeRange] = None
    transmittance: Optional[torch.Tensor] = None

    def combine(self, cur: "RayVolumeIntegralResults") -> "RayVolumeIntegralResults":
        """This integral over [t0, t1] followed by `cur` over [t1, t2]: `output + transmittance * cur.output`
        for every per-ray output this one has (NeRF++, eq. 4), aux losses added, transmittances
        multiplied."""
        output = AttrDict(self.output)
        for key, value in cur.output.items():
            if key == "aux_losses":
                losses = AttrDict(output.get("aux_losses", {}))
                for name, loss in value.items():
                    losses[name] = losses[name] + loss if name in losses else loss
                output.aux_losses = losses
            elif key in output:
                output[key] = output[key] + self.transmittance * value
        return RayVolumeIntegralResults(
            output=output, volume_range=self.volume_range.extend(cur.volume_range),
            transmittance=self.transmittance * cur.transmittance,
        )


@dataclass
class RayVolumeIntegral:
    """Render `model` inside `volume` with `n_samples` samples per ray from `sampler`."""

    model: NeRFModel
    volume: Volume
    sampler: RaySampler
    n_samples: int

    def render_rays(
        self,
        origin: torch.Tensor,
        direction: torch.Tensor,
        t0: Optional[torch.Tensor] = None,
        prev_raw: Optional[AttrDict] = None,
        shared: bool = False,
        render_with_direction: bool = True,
    ) -> RayVolumeIntegralResults:
        """Integrate along rays `origin, direction [batch, ..., 3]` from `t0` (default: the volume's
        entry). With `prev_raw` (an earlier pass), its samples join the new ones: re-queried when the
        model differs, merged without a query when it is `shared`."""
        vrange = self.volume.intersect(origin, direction, t0_lower=t0)
        ts = self.sampler.sample(vrange.t0, vrange.t1, self.n_samples)
        if prev_raw is not None and not shared:
            ts = torch.sort(torch.cat([ts, prev_raw.ts], dim=-2), dim=-2).values
        directions = direction.unsqueeze(-2).expand(*ts.shape[:-1], 3)
        positions = origin.unsqueeze(-2) + ts * directions
        mids = (ts[..., 1:, :] + ts[..., :-1, :]) / 2
        raw = AttrDict(self.model(Query(
            position=positions, direction=directions if render_with_direction else None,
            t_min=torch.cat([vrange.t0[..., None, :], mids], dim=-2), t_max=torch.cat([mids, vrange.t1[..., None, :]], dim=-2),
        )))
        raw.ts = ts
        if prev_raw is not None and shared:
            raw = _merge_sorted(raw, prev_raw)
        output, transmittance = self.integrate_samples(vrange, raw)
        hit = vrange.intersected
        transmittance = torch.where(hit, transmittance, torch.ones_like(transmittance))
        output = output.map(lambda _, value: torch.where(hit, value, torch.zeros_like(value)),
                            should_map=lambda key, value: isinstance(value, torch.Tensor) and value.shape[:-1] == hit.shape[:-1])
        return RayVolumeIntegralResults(output=output, raw=raw, volume_range=vrange, transmittance=transmittance)

    def integrate_samples(self, volume_range: VolumeRange, raw: AttrDict) -> Tuple[AttrDict, torch.Tensor]:
        """Quadrature of `raw` (`ts`, `density [..., n, 1]`, `channels [..., n, C]`, other per-sample
        tensors, `aux_losses`) over `volume_range`: every per-sample tensor weighted by
        `alpha_i T_i`; `ts` become `distances`; each aux loss is summed per batch element. Stores the
        weights in `raw.weights`; returns the output and the transmittance `[..., 1]` left."""
        integral = integrate_samples(volume_range, raw.ts, raw.density, raw.channels)
        weights = integral.weights
        output = AttrDict({
            key: torch.sum(value * weights, dim=-2) for key, value in raw.items()
            if key not in _NOT_INTEGRATED and key != "channels" and isinstance(value, torch.Tensor)
        })
        output.channels, output.distances = integral.channels, integral.distances
        output.aux_losses = AttrDict()
        for key, detach in (("aux_losses", False), ("no_weight_grad_aux_losses", True)):
            w = weights.detach() if detach else weights
            for name, loss in raw.get(key, {}).items():
                output.aux_losses[name] = torch.sum(loss * w, dim=-2).reshape(loss.shape[0], -1).sum(dim=-1)
        raw.weights = weights
        return output, integral.transmittance


def render_rays(
    rays: torch.Tensor,
    parts: List[RayVolumeIntegral],
    void_model: NeRFModel,
    shared: bool = False,
    prev_raw_outputs: Optional[List[AttrDict]] = None,
    render_with_direction: bool = True,
    importance_sampling_options: Optional[Dict[str, Any]] = None,
) -> Tuple[RayVolumeIntegralResults, List[RaySampler], List[AttrDict]]:
    """Volume rendering of `rays [batch, ..., 2, 3]` through consecutive volumes (`parts`, each
    starting where the previous one ends), then the `void_model` colour seen through the
    transmittance left.

    Returns the combined results, one `ImportanceRaySampler` per part (for a finer pass, with
    `importance_sampling_options`) and each part's raw samples.
    """
    origin, direction = rays[..., 0, :], rays[..., 1, :]
    prev_raw_outputs = [None] * len(parts) if prev_raw_outputs is None else prev_raw_outputs
    samplers, raw_outputs, results, t0 = [], [], None, None
    for part, prev_raw in zip(parts, prev_raw_outputs):
        part_results = part.render_rays(origin, direction, t0=t0, prev_raw=prev_raw, shared=shared,
                                        render_with_direction=render_with_direction)
        samplers.append(ImportanceRaySampler(part_results.volume_range, part_results.raw,
                                             **(importance_sampling_options or {})))
        raw_outputs.append(part_results.raw)
        t0 = part_results.volume_range.next_t0()
        results = part_results if results is None else results.combine(part_results)
    void = void_model(Query(position=origin, direction=direction))
    results.output.channels = results.output.channels + results.transmittance * void
    return results, samplers, raw_outputs


def _range(t0: torch.Tensor, t1: torch.Tensor) -> VolumeRange:
    return VolumeRange(t0=t0, t1=t1, intersected=torch.ones_like(t0, dtype=torch.bool))


def _merge_sorted(raw: AttrDict, prev_raw: AttrDict) -> AttrDict:
    """`raw` and `prev_raw` (same keys, samples along dim -2) merged in the order of their ts."""
    ts, order = torch.sort(torch.cat([raw.ts, prev_raw.ts], dim=-2), dim=-2)
    merged = AttrDict()
    for key, value in raw.items():
        if key == "ts" or not isinstance(value, torch.Tensor):
            continue
        both = torch.cat([value, prev_raw[key]], dim=-2)
        merged[key] = torch.gather(both, -2, order.expand(*order.shape[:-1], both.shape[-1]))
    merged.ts = ts
    return merged
