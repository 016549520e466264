"""The benchmark harness runs end to end on toy sizes and writes a well-formed JSON and Markdown report."""
import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from bench import run as bench_run
from bench.flops import text_model_flops
from bench.measure import measure
from bench.report import add_efficiency
from bench.stage_types import Context
from bench.stages import TINY_TEXT, _peak_size
from shap_e.diffusion.presets import FAST_STEPS

# One subprocess per stage (~2 s each for the torch import): keep the list short.
SMOKE_STAGES = "text300M_fwd_bf16,text300M_fwd_fp16,sample_fast,asset_to_batch,small_text_to_glb"


@pytest.fixture(scope="module")
def smoke_report(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("bench")
    paths = bench_run.main(["--tiny", "--stages", SMOKE_STAGES, "--repeats", "2", "--warmup", "1",
                            "--out-dir", str(out_dir)])
    return json.loads(paths["json"].read_text()), paths["md"].read_text()


def test_json_report_has_one_row_per_stage_with_timings(smoke_report):
    doc, _ = smoke_report
    rows = {r["stage"]: r for r in doc["results"]}
    assert list(rows) == ["matmul_peak", "text300M_fwd_bf16", "text300M_fwd_fp16", "sample_fast",
                          "asset_to_batch", "small_text_to_glb"]
    for name in ("matmul_peak", "text300M_fwd_bf16", "sample_fast", "asset_to_batch", "small_text_to_glb"):
        row = rows[name]
        assert row["status"] == "ok", row
        assert len(row["runs_s"]) == 2 and row["warmup"] == 1
        assert 0 < row["min_s"] <= row["median_s"]
        assert row["stage_peak_rss_mb"] > 50
    assert rows["asset_to_batch"]["metrics"] == {"points": 256, "views": "2x16²"}
    assert rows["small_text_to_glb"]["metrics"]["glb_bytes"] > 1000  # the bundled model wrote a GLB
    assert doc["system"]["torch"] == torch.__version__ and doc["mode"] == "tiny"


def test_transformer_rows_report_gflops_against_the_measured_peak(smoke_report):
    doc, _ = smoke_report
    rows = {r["stage"]: r for r in doc["results"]}
    peak = rows["matmul_peak"]["metrics"]["peak_gflops"]
    assert peak["fp32"] > 0 and peak["bf16"] > 0
    row = rows["text300M_fwd_bf16"]
    assert row["info"]["flops"] == text_model_flops(TINY_TEXT, batch=2)["total"]
    assert row["gflops"] == pytest.approx(row["info"]["flops"] / row["median_s"] / 1e9)
    local_peak = row["metrics"]["local_peak_gflops"]
    assert local_peak > 0
    assert row["fraction_of_peak"] == pytest.approx(row["gflops"] / local_peak)


def test_bf16_forward_stays_close_to_fp32(smoke_report):
    doc, _ = smoke_report
    row = {r["stage"]: r for r in doc["results"]}["text300M_fwd_bf16"]
    if row["info"]["dtype"] != "bfloat16":
        pytest.skip("this CPU has no bf16 support; the stage ran in float32")
    metrics = row["metrics"]
    assert metrics["finite"] and 0 < metrics["rel_err_vs_fp32"] < 0.05


def test_sampler_row_counts_one_batched_guided_evaluation_per_step(smoke_report):
    doc, _ = smoke_report
    row = {r["stage"]: r for r in doc["results"]}["sample_fast"]
    assert row["info"]["steps"] == FAST_STEPS and row["info"]["sampler"] == "dpmpp_2m"
    assert row["metrics"]["model_evals"] == FAST_STEPS and row["metrics"]["rows_per_eval"] == [2]
    assert row["s_per_eval"] == pytest.approx(row["median_s"] / FAST_STEPS)


def test_markdown_table_has_a_row_per_result_and_consistent_columns(smoke_report):
    doc, md = smoke_report
    table = [line for line in md.splitlines() if line.startswith("|")]
    header, rows = table[0], table[2:]
    assert "median s" in header and "GFLOP/s" in header
    assert len(rows) == len(doc["results"])
    assert {line.count("|") for line in table} == {header.count("|")}
    assert rows[-1].startswith("| small_text_to_glb |") and "glb_bytes=" in rows[-1]


def test_unknown_stage_name_is_rejected():
    with pytest.raises(SystemExit):
        bench_run.parse_args(["--stages", "no_such_stage"])


def test_measure_runs_warmup_then_timed_repeats():
    calls = []
    timing, out = measure(lambda: calls.append(1) or len(calls), repeats=3, warmup=2)
    assert len(calls) == 5 and out == 5
    assert len(timing.runs_s) == 3 and timing.min_s <= timing.median_s
    with pytest.raises(ValueError, match="repeats"):
        measure(lambda: None, repeats=0, warmup=0)


def test_analytic_flops_match_torch_flop_counter_on_the_linears():
    from shap_e.models.configs import model_from_config

    model = model_from_config(TINY_TEXT).eval()
    x, t, emb = torch.randn(2, TINY_TEXT["d_latent"]), torch.tensor([1, 2]), torch.randn(2, 768)
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        model(x, t, embeddings=emb)
    flops = text_model_flops(TINY_TEXT, batch=2)
    # The counter has no formula for the CPU fused attention kernel on some torch builds.
    assert counter.get_total_flops() in (flops["linear"], flops["total"])
    assert flops["attention"] > 0


def test_fp16_stage_is_reported_unavailable_off_cuda(smoke_report):
    doc, md = smoke_report
    row = {r["stage"]: r for r in doc["results"]}["text300M_fwd_fp16"]
    assert row["status"] == "not available" and "CUDA" in row["reason"]
    assert "| text300M_fwd_fp16 |" in md


def test_gpu_matmul_peak_uses_a_product_large_enough_to_time():
    assert _peak_size(Context(device=torch.device("cpu"))) == 2048
    assert _peak_size(Context(device=torch.device("cuda"))) == 8192  # a device object; nothing runs
    assert _peak_size(Context(device=torch.device("cuda"), tiny=True)) == 256


def test_half_precision_rows_are_judged_against_the_peak_of_their_own_dtype():
    peak = {"stage": "matmul_peak", "threads": 8, "status": "ok",
            "metrics": {"peak_gflops": {"fp32": 50.0, "bf16": 800.0, "fp16": 400.0}}}
    rows = [dict(stage=name, threads=8, status="ok", median_s=1.0, info={"dtype": dtype, "flops": 100e9})
            for name, dtype in (("a", "float32"), ("b", "bfloat16"), ("c", "float16"))]
    add_efficiency([peak, *rows])
    assert [r["fraction_of_peak"] for r in rows] == [2.0, 0.125, 0.25]


def test_sampler_stage_draws_samples_in_one_batched_call_per_step():
    from bench.stages import sample

    prepared = sample("dpmpp_2m", fast=True)(Context(device=torch.device("cpu"), tiny=True, fast_steps=4, samples=3))
    out = prepared.run()
    metrics = prepared.after(out)
    assert out.shape == (3, TINY_TEXT["d_latent"]) and prepared.info["samples"] == 3
    assert metrics["model_evals"] == 4 and metrics["rows_per_eval"] == [6]
    assert not torch.allclose(out[0], out[1])  # each sample starts from its own noise


def test_report_gives_seconds_per_sample_for_batched_sampler_rows():
    rows = [{"stage": "sample_fast", "threads": 1, "status": "ok", "median_s": 2.0,
             "info": {"samples": 4}, "metrics": {"model_evals": 16}}]
    add_efficiency(rows)
    assert rows[0]["s_per_eval"] == pytest.approx(0.125) and rows[0]["s_per_sample"] == pytest.approx(0.5)


def test_samples_below_one_is_rejected_by_name():
    with pytest.raises(SystemExit):
        bench_run.parse_args(["--samples", "0"])
