"""The fixed sets of draws that evaluations run on: a validation set for every choice, a test set to report.

A draw is `DRAW_SIZE` items of a dataset split, `iter_dataset(split, DRAW_SIZE, dataset_seed)`; item i
of a draw samples with seed `dataset_seed + i`, so draws 1000 apart share no sampler seed.

* validation: dataset seeds 0, 1000, ..., 5000 (288 items). Every setting of the bundled models
  (guidance, guidance_max_sigma, init_strength, checkpoints, recipes) was chosen on these draws.
* test: dataset seeds 100000, 101000, ..., 122000 (23 draws, 1104 items), never used for a choice.
  With n = 1104 the 95 % Wilson interval of any proportion is within +-2.95 points
  (1.96 * sqrt(0.25 / 1104) = 0.0295), which is what the size was chosen for.

`evaluate_draws` runs an evaluation draw by draw, keeps each finished draw in a cache folder (an
interrupted run resumes where it stopped) and merges the draws into one result with intervals over
all items. See docs/evaluation.md.
"""
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from shap_e.eval.report import make_result
from shap_e.util.atomic import write_atomic

__all__ = ["DRAW_SIZE", "EVAL_SETS", "EvalSet", "evaluate_draws"]

DRAW_SIZE = 48


@dataclass(frozen=True)
class EvalSet:
    """Draws of `draw_size` items, one per dataset seed. `name` is None for an ad-hoc draw (`--seed`)."""

    name: Optional[str]
    dataset_seeds: Tuple[int, ...]
    draw_size: int = DRAW_SIZE

    def __post_init__(self) -> None:
        if not self.dataset_seeds:
            raise ValueError("an evaluation set needs at least one dataset seed")
        if self.draw_size < 1:
            raise ValueError(f"draw_size must be at least 1, got {self.draw_size}")

    @property
    def n(self) -> int:
        return len(self.dataset_seeds) * self.draw_size


EVAL_SETS = {
    "validation": EvalSet("validation", tuple(range(0, 6000, 1000))),
    "test": EvalSet("test", tuple(range(100_000, 123_000, 1000))),
}

# evaluate_draw(dataset_seed, draw_size) -> the result of one draw (`make_result`'s shape)
DrawEvaluation = Callable[[int, int], Dict[str, Any]]


def _cached(path: Path, identity: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The draw result stored at `path` if it was made with the same `identity`, else None."""
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return stored["result"] if stored.get("identity") == identity else None


def _progress(items, enabled: bool, desc: str):
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, disable=not enabled)


def evaluate_draws(
    evaluate_draw: DrawEvaluation,
    eval_set: EvalSet,
    *,
    cache_dir: Optional[Path] = None,
    identity: Optional[Dict[str, Any]] = None,
    progress: bool = False,
) -> Dict[str, Any]:
    """Run `evaluate_draw` on every draw of `eval_set` and merge the draws into one result.

    Each row gains `dataset_seed`; the settings gain `set`, `dataset_seeds` and `draw_size` (and lose
    the per-draw `seed`); `draws` lists each draw's n, seconds and main metrics; the summary and its
    intervals are over all items. With `cache_dir`, each finished draw is kept there as
    `seed_<dataset_seed>.json` with `identity` (what was evaluated, with which settings and weights),
    and a later call with the same identity reuses it instead of evaluating the draw again.
    """
    identity = json.loads(json.dumps({**(identity or {}), "draw_size": eval_set.draw_size}))  # as stored
    draws: List[Dict[str, Any]] = []
    for dataset_seed in _progress(eval_set.dataset_seeds, progress and len(eval_set.dataset_seeds) > 1, "draws"):
        path = None if cache_dir is None else Path(cache_dir) / f"seed_{dataset_seed}.json"
        result = _cached(path, identity) if path is not None else None
        if result is None:
            result = evaluate_draw(dataset_seed, eval_set.draw_size)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(path, json.dumps({"identity": identity, "result": result}) + "\n")
        draws.append(dict(result, dataset_seed=dataset_seed))
    return _merge(draws, eval_set)


def _merge(draws: List[Dict[str, Any]], eval_set: EvalSet) -> Dict[str, Any]:
    first = draws[0]
    rows = [dict(dataset_seed=d["dataset_seed"], **row) for d in draws for row in d["rows"]]
    settings = {k: v for k, v in first["settings"].items() if k not in ("seed", "n")}
    settings = dict(set=eval_set.name, dataset_seeds=list(eval_set.dataset_seeds), draw_size=eval_set.draw_size,
                    n=len(rows), **settings)
    result = make_result(first["task"], rows, settings, sum(d["seconds"] for d in draws))
    main = [k for k in result["intervals"] if "_word" not in k]
    result["draws"] = [dict(dataset_seed=d["dataset_seed"], n=d["summary"]["n"], seconds=d["seconds"],
                            **{k: d["summary"].get(k) for k in main}) for d in draws]
    return result
