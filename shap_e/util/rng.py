"""Random draws with an explicit generator, on any device."""
from typing import Optional, Union

import torch

__all__ = ["draw_device"]


def draw_device(generator: Optional[torch.Generator], device: Union[str, torch.device]) -> torch.device:
    """The device to draw random numbers on for a tensor that lives on `device`.

    With a generator: the generator's own device, and the caller moves the draw to `device`, so a
    CPU generator gives the same numbers whichever device computes (and a CUDA generator serves a
    CUDA tensor without a copy). Without one: `device` itself (torch's global RNG of that device).
    """
    return generator.device if generator is not None else torch.device(device)
