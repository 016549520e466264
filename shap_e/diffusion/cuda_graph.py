"""The denoiser's model call captured in CUDA graphs (`sample_latents(..., cuda_graph=True)`).

One text300M evaluation at batch 2 launches a few hundred small kernels; on a GPU the launches,
not the arithmetic, set its time (bench/README.md, "Results on a GPU"). `torch.compile` with
`mode="reduce-overhead"` records the whole call once per input shape and replays it as one graph.
The first calls compile (tens of seconds); a sampling loop then repeats the same shapes.
Without CUDA the option changes nothing: the model runs eagerly, with a warning.
"""
import warnings
from typing import Any, Callable

import torch

__all__ = ["captured_model"]

ModelFn = Callable[..., torch.Tensor]


def captured_model(model_fn: ModelFn, device: torch.device) -> ModelFn:
    """`model_fn(x, t, **kwargs)` replayed from CUDA graphs on a CUDA `device`; elsewhere `model_fn`
    itself (with a `RuntimeWarning`), so the results are the eager ones.

    Each call's output is cloned out of the graph's static buffer, which the next replay overwrites,
    so samplers may keep earlier outputs (Heun, DPM-Solver++(2M)).
    """
    if torch.device(device).type != "cuda":
        warnings.warn(f"cuda_graph=True needs a CUDA device; on {device} the model runs eagerly",
                      RuntimeWarning, stacklevel=3)
        return model_fn
    compiled = torch.compile(model_fn, mode="reduce-overhead", dynamic=False)

    def run(x: torch.Tensor, t: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(x, t, **kwargs).clone()

    return run
