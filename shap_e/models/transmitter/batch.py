"""The typed input of the transmitter encoder: a point cloud plus multiview renders of one asset each."""
from dataclasses import dataclass, replace
from typing import Optional

import torch

from shap_e.rendering.cameras import ProjectiveCamera


@dataclass
class MultimodalBatch:
    """What the encoder reads (docs/behaviour.md#encoder-batch), as tensors.

    points: `[batch, 6, n_points]` rows x, y, z (in [-1, 1]^3), r, g, b (in [0, 1]), in
        farthest-point order (the encoder takes the first `data_ctx` points as centres).
    views: `[batch, n_views, 3, size, size]` colours in [-1, 1].
    depths: `[batch, n_views, 1, size, size]` camera z-depth (inf where nothing was hit).
    view_alphas: `[batch, n_views, 1, size, size]` coverage in [0, 1].
    cameras: the cameras of the views, `shape == (batch, n_views)`.
    """

    points: torch.Tensor
    views: Optional[torch.Tensor] = None
    depths: Optional[torch.Tensor] = None
    view_alphas: Optional[torch.Tensor] = None
    cameras: Optional[ProjectiveCamera] = None

    @property
    def batch_size(self) -> int:
        return self.points.shape[0]

    def to(self, device: torch.device) -> "MultimodalBatch":
        def move(t):
            return None if t is None else t.to(device)

        return replace(
            self,
            points=self.points.to(device),
            views=move(self.views),
            depths=move(self.depths),
            view_alphas=move(self.view_alphas),
            cameras=None if self.cameras is None else self.cameras.to(device),
        )
