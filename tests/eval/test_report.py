"""Results: means with Wilson or bootstrap intervals, and their JSON and Markdown files."""
import json

import pytest

from shap_e.eval.intervals import bootstrap_mean_interval, wilson_interval
from shap_e.eval.report import make_result, markdown_report, summarize, write_results


def _rows(n):
    return [dict(index=i, iou=0.5 + (i % 5) / 10, category_correct=i % 4 != 0, chamfer=None if i == 0 else 0.01 * i,
                 colour_correct=True, n_faces=0 if i == 1 else 100) for i in range(n)]


def test_summary_means_skip_missing_values_and_count_empty_meshes():
    rows = _rows(8)
    summary, intervals = summarize(rows, ["iou", "category_correct", "chamfer", "missing"])
    assert summary["n"] == 8 and summary["n_empty"] == 1
    assert summary["category_correct"] == 0.75 and summary["missing"] is None and "missing" not in intervals
    assert summary["chamfer"] == round(sum(0.01 * i for i in range(1, 8)) / 7, 4)


def test_accuracies_get_wilson_intervals_and_means_get_bootstrap_intervals():
    rows = _rows(40)
    _, intervals = summarize(rows, ["iou", "category_correct"])
    low, high = wilson_interval(30, 40)
    assert intervals["category_correct"] == {"low": round(low, 4), "high": round(high, 4), "method": "wilson"}
    low, high = bootstrap_mean_interval([r["iou"] for r in rows])
    assert intervals["iou"] == {"low": round(low, 4), "high": round(high, 4), "method": "bootstrap"}


def test_a_result_summarises_the_tasks_metrics_and_those_of_extra_judges():
    rows = [dict(r, category_correct_decoded=not r["category_correct"]) for r in _rows(12)]
    result = make_result("image_to_3d", rows, {"n": 12}, 1.234)
    assert list(result["summary"]) == ["n", "n_empty", "iou", "category_correct", "colour_correct",
                                       "category_correct_decoded"]
    assert set(result["intervals"]) == {"iou", "category_correct", "colour_correct", "category_correct_decoded"}
    assert result["interval_settings"]["confidence"] == 0.95 and result["seconds"] == 1.23


def test_markdown_shows_each_interval_and_lists_the_items_of_small_runs_only():
    small = make_result("image_to_3d", _rows(6), {"n": 6}, 1.0)
    text = markdown_report(small, "small run")
    interval = small["intervals"]["category_correct"]
    assert text.startswith("# small run") and "| metric | value | 95 % interval |" in text
    assert f"| category_correct | {small['summary']['category_correct']:.4g} | {interval['low']:.4g} – " in text
    assert "## Items" in text and text.count("\n| ") >= 2 + len(small["summary"]) + 6
    large = markdown_report(make_result("image_to_3d", _rows(300), {"n": 300}, 1.0))
    assert "## Items" not in large and "The 300 items are listed in the JSON file" in large


def test_result_files_round_trip_with_one_line_per_row(tmp_path):
    result = make_result("image_to_3d", _rows(5), {"n": 5, "dataset_seeds": [0, 1000]}, 2.0)
    json_path, md_path = write_results(result, tmp_path / "out" / "r.json", title="r")
    text = json_path.read_text()
    assert json.loads(text) == result and md_path.read_text().startswith("# r")
    assert sum(line.lstrip().startswith('{"index"') for line in text.splitlines()) == 5
    empty = make_result("ground_truth", [], {"n": 0}, 0.0)
    assert json.loads(write_results(empty, tmp_path / "empty.json")[0].read_text()) == empty
    with pytest.raises(ValueError, match=r"\.json"):
        write_results(result, tmp_path / "r.txt")
