"""Vector helpers of the ray caster (official path)."""
import torch

__all__ = ["cross_product", "normalize"]


def normalize(v: torch.Tensor) -> torch.Tensor:
    """`v [..., 3]` divided by its length (a zero vector gives NaNs)."""
    return v / torch.linalg.norm(v, dim=-1, keepdim=True)


def cross_product(v1: torch.Tensor, v2: torch.Tensor) -> torch.Tensor:
    """The cross product `v1 x v2` of `[..., 3]` tensors, broadcasting their leading dimensions."""
    return torch.linalg.cross(v1, v2, dim=-1)
