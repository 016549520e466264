"""PointNet++ neighbourhood helpers: squared distances, ball queries, gathering points by index."""
import torch

__all__ = ["ball_query", "gather_points", "square_distance"]


def square_distance(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """`[batch, n, 3]`, `[batch, m, 3]` -> `[batch, n, m]` as `|a|^2 + |b|^2 - 2 a.b` (reference rounding)."""
    dist = -2 * torch.matmul(src, dst.transpose(1, 2))
    dist = dist + torch.sum(src**2, -1)[:, :, None]
    return dist + torch.sum(dst**2, -1)[:, None, :]


def ball_query(radius: float, n_sample: int, xyz: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
    """Indices `[batch, n_centres, n_sample]` of the smallest-index points within `radius`.

    Neighbours are in ascending index order; a short list is padded with its first index.
    """
    n_points = xyz.shape[1]
    dist = square_distance(centres, xyz)
    index = torch.arange(n_points, device=xyz.device).expand_as(dist)
    index = index.masked_fill(dist > radius**2, n_points)
    k = min(n_sample, n_points)
    index = torch.topk(index, k, dim=-1, largest=False, sorted=True).values
    if k < n_sample:
        index = torch.cat([index, index.new_full((*index.shape[:-1], n_sample - k), n_points)], dim=-1)
    first = index[..., :1].expand_as(index)
    return torch.where(index == n_points, first, index)


def gather_points(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """`[batch, n, c]` gathered by `[batch, ...]` indices -> `[batch, ..., c]`."""
    batch = torch.arange(values.shape[0], device=values.device).view(-1, *([1] * (index.dim() - 1)))
    return values[batch, index]
