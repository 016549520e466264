"""The int8 comparison and the official end-to-end stage: their harness, on the golden model and by parts."""
import importlib
import json

import pytest
import torch

from bench import int8 as int8_bench
from bench import run as bench_run
from bench.official_e2e import PHASES, PhaseRecorder, official_text_to_glb
from bench.report import markdown
from bench.stage_types import Context, StageUnavailable
from shap_e.models.quantize import int8_available


@pytest.mark.skipif(not int8_available(), reason="this torch build has no CPU quantisation engine")
def test_int8_bench_interleaves_the_variants_and_reports_errors_and_distances(tmp_path):
    out = tmp_path / "int8.json"
    doc = int8_bench.main(["--model", "golden", "--repeats", "2", "--warmup", "0", "--samplers", "fast",
                           "--sample-variants", "int8", "--out", str(out)])
    assert json.loads(out.read_text())["model"] == "golden"
    rows = {r["variant"]: r for r in doc["forward"]}
    assert list(rows) == ["fp32", "bf16", "int8"] and all(len(r["cpu_s"]) == 2 for r in rows.values())
    assert rows["fp32"]["rel_err"] == 0 and 0 < rows["int8"]["rel_err"] < 0.03 and rows["int8"]["cosine"] > 0.999
    assert [(r["sampler"], r["variant"]) for r in doc["sampling"]] == [("fast", "fp32"), ("fast", "int8")]
    assert doc["sampling"][1]["rel_rms_vs_fp32"] > 0


def test_every_recorded_phase_names_a_function_the_command_calls():
    for module_name, attribute, _ in PHASES:
        assert callable(getattr(importlib.import_module(module_name), attribute)), (module_name, attribute)


def test_phase_recorder_times_each_call_and_keeps_the_process_peak():
    class Work:
        @staticmethod
        def allocate(mb: int) -> int:
            return int(torch.ones(mb * 2**18).sum())  # mb MiB of float32, touched

    recorder = PhaseRecorder()
    recorder.wrap(Work, "allocate", "big")
    assert Work.allocate(64) == 64 * 2**18
    phase = recorder.phases[0]
    assert phase["phase"] == "big" and phase["wall_s"] > 0
    if phase["peak_rss_mb"]:  # Linux: the phase's own peak holds the 64 MiB it touched
        assert phase["peak_rss_mb"] - phase["rss_after_mb"] > 50
        assert recorder.process_peak_mb >= phase["peak_rss_mb"]


def test_official_stage_needs_the_full_size_cpu_run():
    with pytest.raises(StageUnavailable, match="full-size CPU stage"):
        official_text_to_glb("float32")(Context(device=torch.device("cpu"), tiny=True))


def test_report_lists_the_phases_of_an_end_to_end_row_and_the_peer_section():
    phases = [{"phase": "load_prior", "wall_s": 3.21, "cpu_s": 2.5, "peak_rss_mb": 1620.4, "rss_after_mb": 1600.0}]
    row = {"stage": "official_text_to_glb", "threads": 1, "status": "ok", "runs_s": [10.0], "warmup": 0,
           "median_s": 10.0, "min_s": 10.0, "info": {}, "metrics": {"phases": phases, "faces": 12}}
    doc = {"timestamp": "t", "mode": "full", "results": [row], "loadavg_end": None,
           "peer": {"status": "error", "reason": ["ModuleNotFoundError: No module named 'diffusers'"]},
           "system": {"torch": "x", "device": "cpu", "cpu_model": "c", "logical_cpus": 2, "avx512_bf16": False,
                      "amx_bf16": False, "mkldnn_bf16_supported": False}}
    text = markdown(doc)
    assert "load_prior 3.2 / 2.5 / 1620" in text and "faces=12" in text
    assert "## Peer: diffusers" in text and "No module named 'diffusers'" in text


def test_peer_option_alone_runs_only_the_matmul_peak_stage():
    args = bench_run.parse_args(["--peer", "diffusers"])
    assert [s.name for s in args.stage_list] == ["matmul_peak"] and args.peer == "diffusers"


def test_sampler_stage_with_cuda_graphs_falls_back_on_the_cpu_and_counts_its_evaluations():
    from bench.stages import sample

    prepared = sample("dpmpp_2m", True)(Context(device=torch.device("cpu"), tiny=True, fast_steps=4, cuda_graph=True))
    with pytest.warns(RuntimeWarning, match="cuda_graph=True needs a CUDA device"):
        out = prepared.run()
    assert prepared.info["cuda_graph"] is True
    assert prepared.after(out)["model_evals"] == 4 and torch.isfinite(out).all()
