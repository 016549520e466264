"""The validation and test sets, and evaluations run draw by draw, merged and resumed."""
import json

import pytest

from shap_e.eval.intervals import wilson_interval
from shap_e.eval.report import make_result
from shap_e.eval.sets import DRAW_SIZE, EVAL_SETS, EvalSet, evaluate_draws


def test_validation_is_the_tuning_draws_and_test_is_disjoint_and_large_enough():
    validation, test = EVAL_SETS["validation"], EVAL_SETS["test"]
    assert validation.dataset_seeds == (0, 1000, 2000, 3000, 4000, 5000) and validation.n == 288
    assert not set(validation.dataset_seeds) & set(test.dataset_seeds)
    assert test.draw_size == validation.draw_size == DRAW_SIZE == 48 and test.n == 23 * 48
    # Item i of a draw samples with dataset_seed + i: no two items of the two sets share a sampler seed.
    sampler_seeds = [{s + i for s in eval_set.dataset_seeds for i in range(DRAW_SIZE)} for eval_set in (validation, test)]
    assert not sampler_seeds[0] & sampler_seeds[1] and len(sampler_seeds[1]) == test.n
    low, high = wilson_interval(test.n // 2, test.n)  # the widest interval of any proportion
    assert (high - low) / 2 <= 0.03


def _fake_draw(calls):
    def evaluate(seed, n):
        calls.append(seed)
        rows = [dict(seed=seed + i, category_correct=(seed // 1000 + i) % 2 == 0, iou=0.5) for i in range(n)]
        return make_result("image_to_3d", rows, dict(n=n, guidance_scale=2.0, seed=seed), 1.5)

    return evaluate


def test_draws_are_merged_into_one_result_over_all_items():
    calls = []
    result = evaluate_draws(_fake_draw(calls), EvalSet("validation", (0, 1000, 2000), 3))
    assert calls == [0, 1000, 2000]
    assert result["settings"] == dict(set="validation", dataset_seeds=[0, 1000, 2000], draw_size=3, n=9,
                                      guidance_scale=2.0)
    assert [r["dataset_seed"] for r in result["rows"]] == [0] * 3 + [1000] * 3 + [2000] * 3
    assert result["summary"]["n"] == 9 and result["summary"]["category_correct"] == round(5 / 9, 4)
    low, high = wilson_interval(5, 9)
    assert (result["intervals"]["category_correct"]["low"], result["intervals"]["category_correct"]["high"]) == (
        round(low, 4), round(high, 4))
    assert [d["dataset_seed"] for d in result["draws"]] == [0, 1000, 2000] and result["seconds"] == 4.5
    assert result["draws"][1] == dict(dataset_seed=1000, n=3, seconds=1.5, iou=0.5, category_correct=round(1 / 3, 4))


def test_finished_draws_are_kept_and_reused_only_for_the_same_identity(tmp_path):
    eval_set, calls = EvalSet("test", (0, 1000), 2), []
    first = evaluate_draws(_fake_draw(calls), eval_set, cache_dir=tmp_path, identity={"model": "a"})
    assert calls == [0, 1000] and sorted(p.name for p in tmp_path.iterdir()) == ["seed_0.json", "seed_1000.json"]
    again = evaluate_draws(_fake_draw(calls), eval_set, cache_dir=tmp_path, identity={"model": "a"})
    assert calls == [0, 1000] and again == first
    evaluate_draws(_fake_draw(calls), eval_set, cache_dir=tmp_path, identity={"model": "b"})
    assert calls == [0, 1000, 0, 1000]
    stored = json.loads((tmp_path / "seed_0.json").read_text())
    assert stored["identity"] == {"model": "b", "draw_size": 2}


def test_an_interrupted_run_resumes_after_its_last_finished_draw(tmp_path):
    calls = []
    evaluate = _fake_draw(calls)

    def fails_on_the_second_draw(seed, n):
        if seed == 1000:
            raise KeyboardInterrupt
        return evaluate(seed, n)

    eval_set = EvalSet("test", (0, 1000, 2000), 2)
    with pytest.raises(KeyboardInterrupt):
        evaluate_draws(fails_on_the_second_draw, eval_set, cache_dir=tmp_path)
    assert calls == [0]
    (tmp_path / "seed_2000.json").write_text("{ half written")  # unreadable: evaluated again
    result = evaluate_draws(evaluate, eval_set, cache_dir=tmp_path)
    assert calls == [0, 1000, 2000] and result["summary"]["n"] == 6


def test_a_set_needs_seeds_and_items():
    with pytest.raises(ValueError, match="at least one dataset seed"):
        EvalSet("test", ())
    with pytest.raises(ValueError, match="draw_size must be at least 1"):
        EvalSet(None, (0,), 0)
