"""`shap-e eval ...` on a tiny registered transmitter (weights served from a file:// URL)."""
import argparse
import hashlib
import json

import pytest
import yaml
from safetensors.torch import save_file

from shap_e.cli import CliError
from shap_e.util.errors import InvalidArgumentError
from shap_e.cli import eval as eval_cli
from shap_e.models import registry


def parse(argv):
    parser = argparse.ArgumentParser(prog="shap-e")
    eval_cli.add_commands(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    """Run every command in a fresh folder, so the default --out-dir (and its draws) land there."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def tiny_transmitter(monkeypatch, tmp_path, golden):
    e = golden("e")
    weights = tmp_path / "tiny.safetensors"
    save_file({k: v.contiguous() for k, v in e["state_dict"].items()}, str(weights))
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(e["config"]))
    spec = registry.ModelSpec(name="tiny-transmitter", config_file=str(config), url=weights.as_uri(),
                              sha256=hashlib.sha256(weights.read_bytes()).hexdigest(), description="tiny test model")
    monkeypatch.setitem(registry.MODELS, spec.name, spec)
    return spec.name


def test_eval_reconstruction_writes_json_and_markdown(tmp_path, tiny_transmitter):
    out = tmp_path / "cards" / "recon.json"
    args = parse(["eval", "reconstruction", "--model", tiny_transmitter, "-n", "1", "--grid-size", "16",
                  "--resolution", "16", "--device", "cpu", "--cache-dir", str(tmp_path / "cache"), "-o", str(out)])
    args.run(args)
    result = json.loads(out.read_text())
    assert result["task"] == "reconstruction" and result["settings"]["model"] == tiny_transmitter
    # The result names the exact weights it scored: the registry hash, verified when they were loaded.
    assert result["settings"]["model_sha256"] == registry.MODELS[tiny_transmitter].sha256
    assert "decoder" not in result["settings"]
    assert len(result["rows"]) == 1 and 0.0 <= result["summary"]["iou"] <= 1.0
    assert out.with_suffix(".md").read_text().startswith(f"# shap-e eval reconstruction: {tiny_transmitter}")


def test_eval_reconstruction_passes_refinement_placement_and_references_through(tmp_path, tiny_transmitter, monkeypatch):
    from shap_e.eval import classify

    built = []
    # Record each reference reconstruction request (the reconstruction itself is tested in test_classify).
    monkeypatch.setattr(classify, "_reconstruct", lambda *a: built.append(a[1:4]) or classify.to_eval_mesh(a[0]))
    out = tmp_path / "recon.json"
    args = parse(["eval", "reconstruction", "--model", tiny_transmitter, "-n", "1", "--grid-size", "16",
                  "--resolution", "16", "--device", "cpu", "--cache-dir", str(tmp_path / "cache"), "-o", str(out),
                  "--refine-steps", "2", "--vertex-placement", "sampled", "--references", "decoded"])
    args.run(args)
    settings = json.loads(out.read_text())["settings"]
    assert settings["refine_steps"] == 2 and settings["vertex_placement"] == "sampled"
    assert settings["references"] == "decoded"
    # The decoded references come from the evaluated transmitter, at the evaluation's grid and placement.
    assert len(built) == 120 and {(g, p) for _, g, p in built} == {(16, "sampled")}
    assert all(hasattr(xm, "encoder") and hasattr(xm, "renderer") for xm, _, _ in built)


def test_eval_classifier_with_decoded_references_uses_the_decoder(tmp_path, tiny_transmitter, monkeypatch):
    from shap_e.eval import classify

    built = []  # each reference reconstruction request (the reconstruction itself is tested in test_classify)
    monkeypatch.setattr(classify, "_reconstruct", lambda *a: built.append(a[1:4]) or classify.to_eval_mesh(a[0]))
    out = tmp_path / "decoded.json"
    args = parse(["eval", "classifier", "-n", "2", "-o", str(out), "--references", "decoded", "--decoder",
                  tiny_transmitter, "--grid-size", "16", "--cache-dir", str(tmp_path / "cache")])
    args.run(args)
    result = json.loads(out.read_text())
    assert result["settings"]["references"] == "decoded" and result["settings"]["n_references"] == 240
    assert result["settings"]["decoder"] == tiny_transmitter
    assert result["settings"]["decoder_sha256"] == registry.MODELS[tiny_transmitter].sha256
    assert len(built) == 120 and {(g, p) for _, g, p in built} == {(16, "reference")}
    args = parse(["eval", "classifier", "-n", "2", "--references", "decoded"])
    with pytest.raises(CliError, match="--references decoded needs --decoder"):
        args.run(args)


def test_eval_with_both_references_judges_each_mesh_twice(tmp_path, tiny_transmitter, monkeypatch):
    from shap_e.eval import classify

    built = []  # each reference reconstruction request (the reconstruction itself is tested in test_classify)
    monkeypatch.setattr(classify, "_reconstruct", lambda *a: built.append(a[1:4]) or classify.to_eval_mesh(a[0]))
    out = tmp_path / "both.json"
    args = parse(["eval", "reconstruction", "--model", tiny_transmitter, "-n", "2", "--grid-size", "16",
                  "--resolution", "16", "--device", "cpu", "--cache-dir", str(tmp_path / "cache"), "-o", str(out),
                  "--references", "both"])
    args.run(args)
    result = json.loads(out.read_text())
    assert result["settings"]["references"] == "both" and len(built) == 120  # decoded references built once
    assert {"category_correct", "category_correct_decoded"} <= set(result["summary"])
    assert all("pred_category" in row and "pred_category_decoded" in row for row in result["rows"])
    args = parse(["eval", "classifier", "-n", "2", "--references", "both"])
    with pytest.raises(CliError, match="--references both needs --decoder"):
        args.run(args)


def test_eval_classifier_scores_ground_truth(tmp_path):
    out = tmp_path / "gt.json"
    args = parse(["eval", "classifier", "-n", "6", "-o", str(out)])
    args.run(args)
    summary = json.loads(out.read_text())["summary"]
    assert summary["n"] == 6 and summary["colour_correct"] == 1.0


@pytest.mark.parametrize("argv, message", [
    (["-n", "0"], r"-n must be an integer in \[1, 100000\], got 0"),
    (["-o", "results.txt"], "--output must end in .json"),
    (["--steps", "1"], "--steps"),
    (["--refine-steps", "-1"], r"--refine-steps must be an integer in \[0, 100000\], got -1"),
    (["--grid-size", "4"], "--grid-size"),
    (["--batch", "0"], r"--batch must be an integer in \[1, 10000\], got 0"),
])
def test_eval_rejects_bad_arguments_in_one_line(argv, message):
    args = parse(["eval", "text"] + argv)
    with pytest.raises(InvalidArgumentError, match=message):  # CliError is one
        args.run(args)


def test_a_prior_evaluation_names_the_weights_of_the_prior_and_of_its_decoder():
    text = eval_cli._weights_used(parse(["eval", "text", "--model", "text-small"]), "text-small")
    assert text == {"model_sha256": registry.MODELS["text-small"].sha256, "decoder": "transmitter-small",
                    "decoder_sha256": registry.MODELS["transmitter-small"].sha256}
    image = eval_cli._weights_used(parse(["eval", "image", "--decoder", "transmitter"]), "image-small")
    assert image["decoder"] == "transmitter" and image["decoder_sha256"] == registry.MODELS["transmitter"].sha256
    assert eval_cli._weights_used(parse(["eval", "classifier"]), "ground-truth") == {}


def test_eval_text_samples_with_the_models_guidance_max_sigma_unless_told_otherwise(monkeypatch):
    from shap_e.eval import run

    passed = []
    monkeypatch.setattr(run, "evaluate_text_to_3d", lambda prior, xm, prompts, settings, **options: passed.append(
        (prompts, settings)))
    for extra, expected in (([], 2.5), (["--guidance-max-sigma", "all"], None), (["--guidance-max-sigma", "2"], 2.0)):
        args = parse(["eval", "text", "--model", "text-small", "--device", "cpu"] + extra)
        settings = eval_cli._settings(args, registry.get_spec("text-small"))
        assert settings.guidance_max_sigma == expected and settings.guidance_scale == 3.0
    evaluate_draw, _ = eval_cli._draw_evaluation(args, "text-small", settings)
    evaluate_draw(1000, 2)
    prompts, used = passed[0]
    assert [p.prompt for p in prompts] == [p.prompt for p in run.heldout_prompts("heldout_pairs", 2, 1000)]
    assert used.seed == 1000 and used.guidance_max_sigma == 2.0 and used.steps == 64


@pytest.fixture
def tiny_sets(monkeypatch):
    """The named sets as two draws of two items, so a whole set runs in seconds."""
    from shap_e.eval import sets

    monkeypatch.setitem(sets.EVAL_SETS, "validation", sets.EvalSet("validation", (0, 1000), 2))
    monkeypatch.setitem(sets.EVAL_SETS, "test", sets.EvalSet("test", (100_000, 101_000), 2))


def test_eval_on_a_set_records_the_set_and_its_seeds_and_resumes_from_finished_draws(tmp_path, tiny_sets,
                                                                                    monkeypatch):
    from shap_e.eval import run

    out = tmp_path / "test.json"
    argv = ["eval", "classifier", "--set", "test", "--out-dir", str(tmp_path / "runs"), "-o", str(out)]
    args = parse(argv)
    args.run(args)
    result = json.loads(out.read_text())
    assert result["settings"]["set"] == "test" and result["settings"]["dataset_seeds"] == [100_000, 101_000]
    assert result["settings"]["draw_size"] == 2 and result["summary"]["n"] == 4
    assert [row["dataset_seed"] for row in result["rows"]] == [100_000, 100_000, 101_000, 101_000]
    assert result["intervals"]["category_correct"]["method"] == "wilson"
    assert "test set" in out.with_suffix(".md").read_text().splitlines()[0]
    (cache,) = (tmp_path / "runs" / "draws").iterdir()
    assert sorted(p.name for p in cache.iterdir()) == ["seed_100000.json", "seed_101000.json"]
    monkeypatch.setattr(run, "evaluate_ground_truth", lambda *a, **k: pytest.fail("a finished draw ran again"))
    args = parse(argv)
    args.run(args)
    assert json.loads(out.read_text())["rows"] == result["rows"]


def test_eval_writes_under_runs_eval_by_default_and_never_into_model_cards(tmp_path, tiny_sets):
    for argv in (["-n", "2"], ["--seed", "7", "-n", "2"], ["--set", "validation"]):
        args = parse(["eval", "classifier"] + argv)
        args.run(args)
    written = sorted(p.name for p in (tmp_path / "runs" / "eval").iterdir())
    assert written == ["draws"] + [f"ground-truth_classifier_heldout_pairs_{which}.{ext}"
                                   for which in ("seed0", "seed7", "validation") for ext in ("json", "md")]
    assert json.loads((tmp_path / "runs/eval/ground-truth_classifier_heldout_pairs_seed7.json").read_text())[
        "settings"]["dataset_seeds"] == [7]
    assert not (tmp_path / "model_cards").exists()


def test_a_set_fixes_its_draws_and_size(tiny_sets):
    args = parse(["eval", "text", "--set", "test", "-n", "10"])
    with pytest.raises(CliError, match="-n cannot be combined with --set"):
        args.run(args)
    with pytest.raises(SystemExit):
        parse(["eval", "text", "--set", "test", "--seed", "3"])
    with pytest.raises(SystemExit):
        parse(["eval", "text", "--set", "holdout"])
