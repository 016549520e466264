"""Sample folders of `shap-e text` / `shap-e image`: their names, what they hold, and never losing one.

A sample folder is named after its prompt (a slug that keeps Unicode letters) and seed. A short
hash of the full prompt joins the name when the slug was cut, is empty, or is shared by another
prompt of the run or by a folder that holds another prompt. An existing folder that already holds
the same request is kept (a re-run resumes an interrupted bulk run); one that holds anything else
is only replaced with `--overwrite`, and then atomically.
"""
import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from shap_e.cli.common import CliError, say
from shap_e.util.checks import shorten

__all__ = ["Job", "existing_state", "plan_folders", "slug"]

SLUG_LENGTH = 40
_HASH_LENGTH = 8


@dataclass
class Job:
    """One prompt (or picture) of a run: `label` is what the user gave (the prompt, or the picture's
    file name), `key` what identifies it (the prompt, or the picture's sha256), `conditions` the
    model_kwargs of one sample."""

    label: str
    key: str
    conditions: Dict[str, Any]
    folder_stem: str = ""


def slug(text: str) -> str:
    """Lower-case letters and digits of any script, runs of anything else as `_`, at most 40 characters."""
    text = unicodedata.normalize("NFKC", text).lower()
    return re.sub(r"[\W_]+", "_", text).strip("_")[:SLUG_LENGTH].strip("_")


def _full_slug(text: str) -> str:
    return re.sub(r"[\W_]+", "_", unicodedata.normalize("NFKC", text).lower()).strip("_")


def short_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:_HASH_LENGTH]


def plan_folders(jobs: Sequence[Job], output: Path, seeds: Sequence[int], label_field: str) -> List[Job]:
    """Give each job its `folder_stem` (the folder of seed s is `{stem}_seed{s}`); drop a job that
    repeats an earlier one (the same prompt and seeds give the same samples)."""
    unique: Dict[str, Job] = {}
    for number, job in enumerate(jobs, 1):
        if job.key in unique:
            first = next(i for i, other in enumerate(jobs, 1) if other.key == job.key)
            say(f"note: prompt {number} repeats prompt {first} ({shorten(job.label)!r}); its samples are made once")
        unique.setdefault(job.key, job)
    kept = list(unique.values())
    stems = {job.key: slug(job.label) for job in kept}
    shared = [stem for stem in stems.values()]
    for job in kept:
        stem = stems[job.key]
        clash = shared.count(stem) > 1 or _held_by_another(output, stem, seeds, label_field, job.label)
        if not stem or clash or stem != _full_slug(job.label):
            stem = f"{stem}_{short_hash(job.key)}" if stem else f"sample_{short_hash(job.key)}"
        job.folder_stem = stem
    return kept


def _held_by_another(output: Path, stem: str, seeds: Sequence[int], label_field: str, label: str) -> bool:
    """Whether a folder of this stem already holds a sample of another prompt."""
    for seed in seeds[:1]:
        meta = read_meta(output / f"{stem}_seed{seed}")
        if meta is not None and meta.get(label_field) != label:
            return True
    return False


def read_meta(folder: Path) -> Optional[Dict[str, Any]]:
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def existing_state(folder: Path, request: Dict[str, Any], overwrite: bool) -> str:
    """`new` (nothing there), `kept` (the same request is already there, complete) or `replace`
    (`overwrite` and a folder holding something else). Anything else is a CliError saying why."""
    if not folder.exists() and not folder.is_symlink():
        return "new"
    if not folder.is_dir() or folder.is_symlink():
        raise CliError(f"{folder} exists and is not a sample folder; move it away or choose another --output")
    meta = read_meta(folder)
    if meta is not None and all(meta.get(k) == v for k, v in request.items()):
        return "kept"
    if overwrite:
        return "replace"
    what = "another sample" if meta is not None else "something that is not a shap-e sample"
    differs = "" if meta is None else _first_difference(meta, request)
    raise CliError(f"{folder} exists and holds {what}{differs}; pass --overwrite to replace it, or choose "
                   "another --output")


def _first_difference(meta: Dict[str, Any], request: Dict[str, Any]) -> str:
    for key, value in request.items():
        if meta.get(key) != value:
            return f" ({key} {shorten(repr(meta.get(key)), 30)} instead of {shorten(repr(value), 30)})"
    return ""
