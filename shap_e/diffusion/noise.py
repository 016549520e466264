"""Gaussian noise draws that honour a global RNG, one generator, or one generator per sample."""
from typing import Any, Callable, Optional, Sequence, Union

import torch

GeneratorArg = Optional[Union[torch.Generator, Sequence[torch.Generator]]]


def randn(
    shape: Sequence[int],
    generator: GeneratorArg = None,
    device: Union[str, torch.device, None] = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Standard normal noise of `shape` (`[batch, ...]`).

    :param generator: `None` draws from torch's global RNG (exactly one `torch.randn` call, as the
        reference does, so seeded global replays match); a `torch.Generator` is used for the whole
        tensor; a list of generators (one per row) draws row i from generator i, so that sample i of
        a batch equals the same seed sampled alone.
    """
    shape = tuple(shape)
    if generator is None:
        return torch.randn(shape, device=device, dtype=dtype)
    if isinstance(generator, torch.Generator):
        return _draw(shape, generator, device, dtype)
    generators = list(generator)
    if len(generators) != shape[0]:
        raise ValueError(
            f"generator is a list of {len(generators)} generators but the noise has {shape[0]} "
            "rows; pass one generator per sample"
        )
    return torch.stack([_draw(shape[1:], g, device, dtype) for g in generators], dim=0)


def _draw(shape, generator: torch.Generator, device, dtype: torch.dtype) -> torch.Tensor:
    # Draw on the generator's own device, then move: a CPU generator then gives the same
    # numbers whichever device samples.
    noise = torch.randn(shape, generator=generator, device=generator.device, dtype=dtype)
    return noise.to(device) if device is not None else noise


def randn_like(x: torch.Tensor, generator: GeneratorArg = None) -> torch.Tensor:
    """Noise shaped like `x` (`[batch, ...]`); `generator` as in `randn`."""
    if generator is None:
        return torch.randn_like(x)
    return randn(x.shape, generator, device=x.device, dtype=x.dtype)


def check_generator(generator: GeneratorArg, rows: int) -> None:
    """Raise ValueError unless `generator` is None, a Generator, or a list of `rows` Generators."""
    if generator is None or isinstance(generator, torch.Generator):
        return
    if not isinstance(generator, (list, tuple)) or not all(
        isinstance(g, torch.Generator) for g in generator
    ):
        raise ValueError("generator must be None, a torch.Generator or a list of torch.Generator")
    if len(generator) != rows:
        raise ValueError(
            f"generator is a list of {len(generator)} generators but {rows} samples are drawn; "
            "pass one generator per sample"
        )


def model_device(model: Callable[..., Any]) -> torch.device:
    """The device of a model's first parameter; CPU for a parameterless callable."""
    params = getattr(model, "parameters", None)
    first = next(iter(params()), None) if callable(params) else None
    return first.device if first is not None else torch.device("cpu")
