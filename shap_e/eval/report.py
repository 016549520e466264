"""An evaluation's result: per-item rows summarised into means with 95 % intervals, written as JSON + Markdown.

A result is a dict: `task`, `summary` (counts and the mean of each metric), `intervals` (each metric's
interval: Wilson for an accuracy, a seeded percentile bootstrap for a continuous mean; see
`shap_e.eval.intervals`), `interval_settings`, `settings`, `seconds` and `rows` (one per item).
"""
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from shap_e.eval.intervals import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    bootstrap_mean_interval,
    wilson_interval,
)
from shap_e.util.atomic import write_atomic

__all__ = ["TASK_METRICS", "make_result", "markdown_report", "summarize", "write_results"]

# The metrics each task summarises, before the `category_correct_<name>` of any extra judges.
TASK_METRICS = {
    "reconstruction": ("iou", "chamfer", "color_error", "colour_correct", "category_correct"),
    "text_to_3d": ("category_correct", "colour_correct", "category_score"),
    "image_to_3d": ("iou", "category_correct", "colour_correct"),
    "ground_truth": ("category_correct", "colour_correct"),
}
_MAX_MARKDOWN_ROWS = 200  # larger runs list their items in the JSON only


def _interval(values: List[Any]) -> Dict[str, Any]:
    """Wilson for booleans, bootstrap for numbers."""
    if all(isinstance(v, bool) for v in values):
        low, high = wilson_interval(sum(values), len(values))
        method = "wilson"
    else:
        low, high = bootstrap_mean_interval([float(v) for v in values])
        method = "bootstrap"
    return {"low": round(low, 4), "high": round(high, 4), "method": method}


def summarize(rows: Sequence[Dict[str, Any]], keys: Sequence[str]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(summary, intervals): the mean of each key over the rows where it is not None (None when it
    never is), with `n` and `n_empty`; and the 95 % interval of each mean."""
    summary: Dict[str, Any] = {"n": len(rows), "n_empty": sum(r.get("n_faces", 1) == 0 for r in rows)}
    intervals: Dict[str, Any] = {}
    for key in keys:
        values = [r[key] for r in rows if r.get(key) is not None]
        summary[key] = round(sum(float(v) for v in values) / len(values), 4) if values else None
        if values:
            intervals[key] = _interval(values)
    return summary, intervals


def _by_heldout_word(rows: Sequence[Dict[str, Any]]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Category and colour accuracy split by whether the prompt named them with a held-out synonym:
    a prior can only be right on those if its text encoder places the unseen word near the known ones."""
    summary: Dict[str, Any] = {}
    intervals: Dict[str, Any] = {}
    for slot in ("category", "colour"):
        for heldout, label in ((True, "heldout_word"), (False, "training_word")):
            subset, subset_intervals = summarize([r for r in rows if r[f"heldout_{slot}_word"] == heldout],
                                                 [f"{slot}_correct"])
            summary[f"n_{slot}_{label}"] = subset["n"]
            summary[f"{slot}_correct_{label}"] = subset[f"{slot}_correct"]
            if f"{slot}_correct" in subset_intervals:
                intervals[f"{slot}_correct_{label}"] = subset_intervals[f"{slot}_correct"]
    return summary, intervals


def make_result(task: str, rows: List[Dict[str, Any]], settings: Dict[str, Any], seconds: float) -> Dict[str, Any]:
    """The result of `task` over `rows`: its metrics, those of any extra judges found in the rows and,
    for text, the accuracies split by held-out words, each with its interval."""
    extra = [k for k in (rows[0] if rows else {}) if k.startswith("category_correct_")]
    summary, intervals = summarize(rows, TASK_METRICS[task] + tuple(extra))
    if task == "text_to_3d":
        by_word, word_intervals = _by_heldout_word(rows)
        summary.update(by_word)
        intervals.update(word_intervals)
    return {
        "task": task, "summary": summary, "intervals": intervals,
        "interval_settings": {"confidence": CONFIDENCE, "proportions": "wilson",
                              "means": f"percentile bootstrap, {BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}"},
        "settings": settings, "seconds": round(seconds, 2), "rows": rows,
    }


def _cell(value: Any) -> str:
    text = "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)
    return text.replace("|", "\\|")


def _interval_cell(interval: Optional[Dict[str, Any]]) -> str:
    return "" if interval is None else f"{interval['low']:.4g} – {interval['high']:.4g} ({interval['method']})"


def _table(keys: Sequence[str], rows: Sequence[Dict[str, Any]]) -> List[str]:
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    return lines + ["| " + " | ".join(_cell(r.get(k)) for k in keys) + " |" for r in rows]


def markdown_report(result: Dict[str, Any], title: Optional[str] = None) -> str:
    """A Markdown page: settings, the summary table with 95 % intervals, the draws (if any) and the
    items (up to 200; beyond that they are in the JSON file only)."""
    lines = [f"# {title or 'Evaluation: ' + result['task']}", ""]
    lines += [f"- {k}: {v}" for k, v in result["settings"].items()] + [f"- seconds: {result['seconds']}", ""]
    intervals = result.get("intervals", {})
    lines += ["| metric | value | 95 % interval |", "|---|---|---|"]
    lines += [f"| {k} | {_cell(v)} | {_interval_cell(intervals.get(k))} |" for k, v in result["summary"].items()]
    if result.get("draws"):
        lines += ["", "## Draws", ""] + _table(list(result["draws"][0]), result["draws"])
    rows = result["rows"]
    if rows and len(rows) <= _MAX_MARKDOWN_ROWS:
        lines += ["", "## Items", ""] + _table(list(rows[0]), rows)
    elif rows:
        lines += ["", f"The {len(rows)} items are listed in the JSON file beside this page."]
    return "\n".join(lines) + "\n"


def _json_text(result: Dict[str, Any]) -> str:
    """Indented JSON with one line per row, so a set of a thousand items stays readable and small."""
    head = {k: v for k, v in result.items() if k != "rows"}
    rows = ",\n".join("    " + json.dumps(row) for row in result["rows"])
    body = json.dumps(head, indent=2)
    return body[:-2] + ',\n  "rows": [\n' + rows + ("\n" if rows else "") + "  ]\n}\n"


def write_results(result: Dict[str, Any], path: Union[str, Path], title: Optional[str] = None) -> Tuple[Path, Path]:
    """Write `result` as JSON to `path` and as Markdown beside it (same name, `.md`), each atomically."""
    path = Path(path)
    if path.suffix.lower() != ".json":
        raise ValueError(f"path must end in .json (the Markdown goes beside it), got {str(path)!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    md_path = path.with_suffix(".md")
    write_atomic(path, _json_text(result))
    write_atomic(md_path, markdown_report(result, title))
    return path, md_path
