"""`PromptTruncatedWarning`: a prompt was longer than its text encoder reads, and the words left out."""
import sys
import warnings

from shap_e.util.checks import shorten

__all__ = ["PromptTruncatedWarning", "warn_truncated_prompt"]


class PromptTruncatedWarning(UserWarning):
    """A prompt was longer than its text encoder reads: its end does not reach the prior."""


def warn_truncated_prompt(text: str, dropped: str, kept_tokens: int, reader: str) -> None:
    """Warn that `reader` (e.g. "CLIP") conditions the prior on the first `kept_tokens` tokens of
    `text` only, so that `dropped`, the text's end, is left out. The warning names the first line
    outside `shap_e` and torch (the user's call of `sample_latents`, `embed_text`, ...), however deep
    inside the package the prompt was cut."""
    start = text if len(text) <= 40 else text[:40] + "..."
    warnings.warn(
        f"{reader} reads the first {kept_tokens} tokens of a prompt; the end of {start!r} does not reach "
        f"the prior: {shorten(dropped.strip(), 80)!r}. Put what matters first or shorten the prompt.",
        PromptTruncatedWarning,
        stacklevel=_stacklevel_outside_package(),
    )


_INTERNAL_PACKAGES = ("shap_e", "torch")  # torch: `no_grad` wrappers and `Module.__call__` between our frames


def _stacklevel_outside_package() -> int:
    """The `stacklevel` that makes a warning raised in `warn_truncated_prompt` (level 1) name the first
    frame outside `_INTERNAL_PACKAGES`."""
    frame, level = sys._getframe(2), 2
    while frame.f_back is not None and frame.f_globals.get("__name__", "").split(".")[0] in _INTERNAL_PACKAGES:
        frame, level = frame.f_back, level + 1
    return level
