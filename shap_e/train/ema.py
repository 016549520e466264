"""Exponential moving average of model weights."""
from typing import Dict

import torch
import torch.nn as nn


class EMA:
    """`ema = decay * ema + (1 - decay) * weights` after every optimiser step, kept in float32."""

    def __init__(self, model: nn.Module, decay: float):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"ema_decay={decay} must be in [0, 1)")
        self.decay = decay
        self.shadow: Dict[str, torch.Tensor] = {
            k: v.detach().float().clone() for k, v in model.state_dict().items() if v.dtype.is_floating_point
        }

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        for key, value in model.state_dict().items():
            if key in self.shadow:
                self.shadow[key].lerp_(value.detach().float(), 1.0 - self.decay)

    def state_dict(self) -> Dict[str, torch.Tensor]:
        return dict(self.shadow)

    def load_state_dict(self, state: Dict[str, torch.Tensor]) -> None:
        missing = set(self.shadow) - set(state)
        if missing:
            raise ValueError(f"EMA state lacks {sorted(missing)[:5]}")
        self.shadow = {k: state[k].float().clone() for k in self.shadow}

    def copy_to(self, model: nn.Module) -> None:
        """Load the averaged weights into `model` (e.g. for evaluation or export)."""
        state = model.state_dict()
        model.load_state_dict({k: self.shadow.get(k, v).to(v.dtype) for k, v in state.items()})
