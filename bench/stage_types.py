"""What a benchmark stage is: its setup takes a `Context` and returns the `Prepared` callable to time."""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional

import torch


class StageUnavailable(Exception):
    """The code a stage needs does not exist (yet); the report says "not available" and why."""


@dataclass
class Context:
    device: torch.device
    tiny: bool = False
    seed: int = 0
    fast_steps: int = 16
    samples: int = 1  # latents the sampler stages draw at once
    cuda_graph: bool = False  # the sampler stages replay the model from CUDA graphs (sample_latents(cuda_graph=))


@dataclass
class Prepared:
    """What a setup returns: `run()` is timed; `after(last_output)` adds metrics (errors, sizes)."""

    run: Callable[[], Any]
    info: Dict[str, Any] = field(default_factory=dict)
    after: Optional[Callable[[Any], Dict[str, Any]]] = None


@dataclass
class Stage:
    name: str
    description: str
    setup: Callable[[Context], Prepared]
    quick: bool = False
    repeats: int = 3
    warmup: int = 1
    count_flops: bool = False  # count FLOPs with torch's counter during the first warm-up run
