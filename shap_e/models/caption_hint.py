"""Caption hints for a caption-token prior: extra grid tokens that name the caption's colour or category.

MiniLM's token states of an unseen colour word ("ruby", "aqua") are far from those of the colour
names the prior was trained on, so the prior often misreads them. `CaptionHint` is a small read-out
of the caption's token grid (attention pooling over the tokens, then one linear layer) fitted to the
training captions' labels of one attribute (`shap_e.train.caption_hint_fit`). Its probabilities over
the attribute's classes, scaled to a typical token's norm, become one more grid token, so the prior
learns to take that attribute from a clean token. For the colour, the read-out generalises to unseen
words better than the prior does (`text-small` ships with it); a category hint was measured and not
adopted (docs/findings/text-small.md).

A prior configured with `colour_hint: N` and/or `category_hint: M` owns such read-outs (state-dict
keys `colour_hint.*`, `category_hint.*`) and reads grids of `grid_tokens - n_hints` caption tokens,
then the colour token, then the category token; `CaptionHintEncoder` wraps its text encoder so that
sampling builds the same grids as training.
"""
import math
from typing import Sequence

import torch
import torch.nn as nn

__all__ = ["HINT_ATTRIBUTES", "CaptionHint", "CaptionHintEncoder", "append_hints"]

# The attributes a prior can be hinted with, in the order their tokens follow the caption's tokens.
HINT_ATTRIBUTES = ("colour", "category")


class CaptionHint(nn.Module):
    """`[batch, channels, tokens]` caption grid -> `[batch, n_classes]` logits of one attribute.

    The weights start at zero (no random draw, so adding the read-out to a model leaves the rest of
    its initialisation unchanged) and are never trained by the diffusion loss: they are fitted once,
    before the prior trains, and stay frozen.
    """

    def __init__(self, channels: int, n_classes: int, attribute: str = "colour", device=None):
        super().__init__()
        if attribute not in HINT_ATTRIBUTES:
            raise ValueError(f"attribute must be one of {list(HINT_ATTRIBUTES)}, got {attribute!r}")
        if not 1 <= n_classes <= channels:
            raise ValueError(f"{attribute}_hint={n_classes} classes must be between 1 and the grid's {channels} "
                             f"channels")
        self.attribute = attribute
        self.channels = channels
        self.n_classes = n_classes
        # skip_init: no random draw; the fit (`shap_e.train.caption_hint_fit`) initialises them from its seed
        device = device if device is not None else torch.empty(0).device  # the default device
        self.score = nn.utils.skip_init(nn.Linear, channels, 1, device=device)  # attention score of each token
        self.out = nn.utils.skip_init(nn.Linear, channels, n_classes, device=device)
        with torch.no_grad():
            for p in self.parameters():
                p.zero_()
        self.requires_grad_(False)

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        """`[batch, channels, tokens]` -> `[batch, n_classes]` logits; all-zero (padding) tokens are ignored."""
        return self.logits(grid.transpose(1, 2))

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """`[batch, tokens, channels]` (token-major) -> `[batch, n_classes]` logits."""
        present = tokens.abs().sum(-1) > 0  # [batch, tokens]
        scores = self.score(tokens).squeeze(-1).masked_fill(~present, -1e9)
        pooled = (scores.softmax(-1).unsqueeze(-1) * tokens).sum(1)  # [batch, channels]
        return self.out(pooled)

    def hint_token(self, grid: torch.Tensor) -> torch.Tensor:
        """`[batch, channels, tokens]` -> `[batch, channels, 1]`: the class probabilities times
        sqrt(channels) (a unit-scale token's norm) in the first `n_classes` channels, zeros after."""
        with torch.no_grad():
            probabilities = self(grid.float()).softmax(-1)
        token = grid.new_zeros(grid.shape[0], grid.shape[1], 1)
        token[:, :self.n_classes, 0] = (probabilities * math.sqrt(self.channels)).to(grid.dtype)
        return token


def append_hints(grid: torch.Tensor, hints: Sequence[CaptionHint]) -> torch.Tensor:
    """`[batch, channels, tokens]` caption grid -> `[batch, channels, tokens + len(hints)]`: the grid,
    then each hint's token, every one read from the caption tokens alone."""
    tokens = [hint.hint_token(grid.to(hint.out.weight.device)).to(grid.device) for hint in hints]
    return torch.cat([grid, *tokens], dim=2)


class CaptionHintEncoder:
    """A `TextGridConditioner` that reads `n_tokens - len(hints)` caption tokens with `encoder` and
    appends each hint's token: the grids a hinted prior is trained on."""

    def __init__(self, encoder, hints: Sequence[CaptionHint]):
        if not hints:
            raise ValueError("CaptionHintEncoder needs at least one hint")
        self.encoder = encoder
        self.hints = list(hints)

    @property
    def embedding_dim(self) -> int:
        """The wrapped encoder's channels."""
        return self.encoder.embedding_dim

    def embed_text_grid(self, texts: Sequence[str], n_tokens: int) -> torch.Tensor:
        """`[len(texts), embedding_dim, n_tokens]`: `n_tokens - len(hints)` caption tokens, then the hint tokens."""
        n_hints = len(self.hints)
        if n_tokens <= n_hints:
            raise ValueError(f"n_tokens={n_tokens} must be at least {n_hints + 1}: one caption token and "
                             f"{n_hints} hint token(s)")
        return append_hints(self.encoder.embed_text_grid(texts, n_tokens - n_hints), self.hints)
