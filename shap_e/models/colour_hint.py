"""A colour hint for a caption-token prior: one extra grid token naming the caption's colour.

MiniLM's token states of an unseen colour word ("ruby", "aqua") are far from those of the colour
names the prior was trained on, so the prior often misreads them. `ColourHint` is a small read-out
of the caption's token grid (attention pooling over the tokens, then one linear layer) that is
fitted to the training captions' colour labels (`shap_e.train.colour_hint_fit`). Its probabilities
over the colour classes, scaled to a typical token's norm, become one more grid token, so the prior
learns to take its colour from that token: for an unseen word the read-out generalises better than
the prior does (`model_cards/text-small.md`, session 39).

A prior configured with `colour_hint: N` owns such a read-out (state-dict keys `colour_hint.*`) and
reads grids of `grid_tokens - 1` caption tokens plus the hint token; `ColourHintEncoder` wraps its
text encoder so that sampling builds the same grids as training.
"""
import math
from typing import Sequence

import torch
import torch.nn as nn

__all__ = ["ColourHint", "ColourHintEncoder"]


class ColourHint(nn.Module):
    """`[batch, channels, tokens]` caption grid -> `[batch, n_classes]` colour logits.

    The weights start at zero (no random draw, so adding the read-out to a model leaves the rest of
    its initialisation unchanged) and are never trained by the diffusion loss: they are fitted once,
    before the prior trains, and stay frozen.
    """

    def __init__(self, channels: int, n_classes: int, device=None):
        super().__init__()
        if not 1 <= n_classes <= channels:
            raise ValueError(f"colour_hint={n_classes} classes must be between 1 and the grid's {channels} channels")
        self.channels = channels
        self.n_classes = n_classes
        # skip_init: no random draw; the fit (`shap_e.train.colour_hint_fit`) initialises them from its seed
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

    def append_hint(self, grid: torch.Tensor) -> torch.Tensor:
        """`[batch, channels, tokens]` -> `[batch, channels, tokens + 1]`: the grid and its hint token."""
        return torch.cat([grid, self.hint_token(grid)], dim=2)


class ColourHintEncoder:
    """A `TextGridConditioner` that reads `n_tokens - 1` caption tokens with `encoder` and appends
    `hint`'s colour token: the grids a `colour_hint` prior is trained on."""

    def __init__(self, encoder, hint: ColourHint):
        self.encoder = encoder
        self.hint = hint

    @property
    def embedding_dim(self) -> int:
        """The wrapped encoder's channels."""
        return self.encoder.embedding_dim

    def embed_text_grid(self, texts: Sequence[str], n_tokens: int) -> torch.Tensor:
        """`[len(texts), embedding_dim, n_tokens]`: `n_tokens - 1` caption tokens, then the hint token."""
        if n_tokens < 2:
            raise ValueError(f"n_tokens={n_tokens} must be at least 2: one caption token and the colour hint")
        grid = self.encoder.embed_text_grid(texts, n_tokens - 1)
        hint = self.hint.hint_token(grid.to(self.hint.out.weight.device))
        return torch.cat([grid, hint.to(grid.device)], dim=2)
