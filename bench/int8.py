"""int8 against float32 and bf16 autocast for the text prior, all variants interleaved in one process.

Usage: `python -m bench.int8 --model full|golden|text-small [--repeats 3] [--warmup 1]
[--samplers fast,heun64] [--forward-variants fp32,bf16,int8] [--sample-variants fp32,bf16,int8]
[--threads 1]`. `full` is text300M's
shapes with seeded random weights (`bench.stages._text_setup`, zero-initialised matrices
randomised); `golden` is the small text model of tests/golden/d (width 64, 2 layers) with its
weights, diffusion and text embeddings; `text-small` is the bundled trained prior (width 128,
4 layers) with four captions, guidance 2 and `guidance_max_sigma` 5: trained weights, so
activations with a trained model's statistics.

* Forward, batch 2 (one guided step): the variants run in turn, `warmup` untimed then `repeats`
  timed rounds, so that other work on the machine slows them alike; median wall and CPU seconds,
  and each variant's relative error and cosine against float32 (computed in float64).
* Sampling: `sample_latents` of the guided samples (one for `full` at guidance 15, the embeddings'
  rows otherwise) from the same seed with the official 64-step Heun (`heun64`) and `--preset fast` (`fast`); the distance of
  each variant's latent from float32's as a relative RMS, `|a - b| / |b|`.

bf16 is forced here even where the CPU has no native bf16 (the package's default uses float32
there): the table then shows what bf16 costs on such a CPU. Results are printed as Markdown and
written to `bench/results/int8_<model>.json`.
"""
import argparse
import copy
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch

from bench.measure import system_info
from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.diffusion.sample import sample_latents
from shap_e.models.quantize import quantize_int8
from shap_e.util.atomic import write_atomic

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "d_sample_latents.pt"
RESULTS = ROOT / "bench" / "results"
SAMPLERS = {"heun64": "default", "fast": "fast"}
GUIDANCE = {"full": 15.0, "golden": 3.0, "text-small": 2.0}
GUIDANCE_MAX_SIGMA = {"text-small": 5.0}
CAPTIONS = ["a red cube", "a tall green lamp", "a blue chair", "a white table with red legs"]
SEED = 0


def build(model_kind: str):
    """`(model, forward inputs, diffusion, conditional embeddings [n, ...])` in float32."""
    if model_kind == "text-small":
        from shap_e.models.download import load_config, load_model

        model = load_model("text-small")
        emb = model.cached_model_kwargs(len(CAPTIONS), {"texts": CAPTIONS})["embeddings"]
        x = torch.randn(2, model.d_latent, generator=torch.Generator().manual_seed(SEED))
        inputs = {"x": x, "t": torch.tensor([300, 300]), "embeddings": torch.cat([emb[:1], torch.zeros_like(emb[:1])])}
        return model, inputs, diffusion_from_config(load_config("diffusion-small")), emb
    if model_kind == "golden":
        from shap_e.models.configs import model_from_config

        golden = torch.load(GOLDEN, weights_only=True)
        model = model_from_config(golden["config"]["text_model"])
        model.load_state_dict(golden["state_dict"]["text_model"])
        emb = golden["inputs"]["text_embeddings"]
        x = torch.randn(2, model.d_latent, generator=torch.Generator().manual_seed(SEED))
        inputs = {"x": x, "t": torch.tensor([500, 500]), "embeddings": torch.cat([emb[:1], torch.zeros_like(emb[:1])])}
        return model.eval(), inputs, diffusion_from_config(golden["config"]["diffusion"]), emb
    from bench.stage_types import Context
    from bench.stages import _text_setup, read_yaml

    _, model, inputs = _text_setup(Context(device=torch.device("cpu"), seed=SEED))
    return model, inputs, diffusion_from_config(read_yaml("diffusion_config.yaml")), inputs["embeddings"][:1]


def variants(model: torch.nn.Module) -> Dict[str, Dict[str, Any]]:
    """name -> the model to call and the autocast dtype: float32, bf16 autocast, int8."""
    return {
        "fp32": {"model": model, "dtype": torch.float32},
        "bf16": {"model": model, "dtype": torch.bfloat16},
        "int8": {"model": quantize_int8(copy.deepcopy(model)), "dtype": torch.float32},
    }


def forward(variant: Dict[str, Any], inputs: Dict[str, torch.Tensor]) -> torch.Tensor:
    dtype = variant["dtype"]
    with torch.inference_mode(), torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        return variant["model"](inputs["x"], inputs["t"], embeddings=inputs["embeddings"]).float()


def interleaved(fns: Dict[str, Callable[[], Any]], repeats: int, warmup: int):
    """Run every fn once per round, `warmup` untimed rounds then `repeats` timed ones.

    :return: `({name: {"wall": [...], "cpu": [...]}}, {name: last output})`.
    """
    times = {name: {"wall": [], "cpu": []} for name in fns}
    outputs: Dict[str, Any] = {}
    for round_index in range(warmup + repeats):
        for name, fn in fns.items():
            wall, cpu = time.perf_counter(), time.process_time()
            outputs[name] = fn()
            if round_index >= warmup:
                times[name]["wall"].append(time.perf_counter() - wall)
                times[name]["cpu"].append(time.process_time() - cpu)
    return times, outputs


def errors(out: torch.Tensor, reference: torch.Tensor) -> Dict[str, float]:
    """Relative error `|out - ref| / |ref|` and cosine, in float64."""
    a, b = out.double().flatten(), reference.double().flatten()
    return {"rel_err": float((a - b).norm() / b.norm()), "cosine": float(a @ b / (a.norm() * b.norm()))}


def forward_rows(table: Dict[str, Dict[str, Any]], inputs, repeats: int, warmup: int) -> List[Dict[str, Any]]:
    times, outputs = interleaved({name: (lambda v=v: forward(v, inputs)) for name, v in table.items()},
                                 repeats, warmup)
    rows = []
    for name in table:
        row = {"variant": name, "wall_median_s": statistics.median(times[name]["wall"]),
               "cpu_median_s": statistics.median(times[name]["cpu"]), "wall_s": times[name]["wall"],
               "cpu_s": times[name]["cpu"], **errors(outputs[name], outputs["fp32"])}
        row["speedup_vs_fp32_cpu"] = rows[0]["cpu_median_s"] / row["cpu_median_s"] if rows else 1.0
        rows.append(row)
    return rows


def relative_rms(latent: torch.Tensor, reference: torch.Tensor) -> float:
    """`|latent - reference| / |reference|`, in float64."""
    a, b = latent.double(), reference.double()
    return float((a - b).norm() / b.norm())


def sample_rows(table, diffusion, embedding, samplers: List[str], guidance: float,
                guidance_max_sigma: Optional[float] = None) -> List[Dict[str, Any]]:
    """For each sampler, one sample per variant from the same seed; distance to float32's latent.

    With both samplers, a last row gives the float32 fast latent's distance from the float32 Heun
    one: the yardstick of how far a sampler change alone moves the result on these weights.
    """
    rows, fp32_latents = [], {}
    for sampler in samplers:
        latents = {}
        for name, variant in table.items():
            start = time.process_time()
            latents[name] = sample_latents(
                batch_size=len(embedding), model=variant["model"], diffusion=diffusion,
                model_kwargs={"embeddings": embedding}, guidance_scale=guidance, preset=SAMPLERS[sampler], generator=torch.Generator().manual_seed(SEED), dtype=variant["dtype"],
                guidance_max_sigma=guidance_max_sigma)
            rows.append({"sampler": sampler, "variant": name, "cpu_s": time.process_time() - start})
            print(f"[int8] {sampler} {name}: {rows[-1]['cpu_s']:.1f} CPU s", flush=True)
        for row in rows[-len(table):]:
            row["rel_rms_vs_fp32"] = relative_rms(latents[row["variant"]], latents["fp32"])
        fp32_latents[sampler] = latents["fp32"]
    if {"fast", "heun64"} <= set(fp32_latents):
        rows.append({"sampler": "fast vs heun64", "variant": "fp32", "cpu_s": 0.0,
                     "rel_rms_vs_fp32": relative_rms(fp32_latents["fast"], fp32_latents["heun64"])})
    return rows


def markdown(doc: Dict[str, Any]) -> str:
    s = doc["system"]
    lines = [f"`python -m bench.int8 --model {doc['model']}`: CPU {s['cpu_model']}, avx512_bf16={s['avx512_bf16']}, "
             f"torch {s['torch']}, {doc['threads']} thread(s), load average {s['loadavg']} -> {doc['loadavg_end']}", "",
             "| variant | wall s (median) | CPU s (median) | speed-up vs fp32 (CPU s) | rel. error vs fp32 | cosine |",
             "|---|---|---|---|---|---|"]
    for r in doc["forward"]:
        lines.append(f"| {r['variant']} | {r['wall_median_s']:.3f} | {r['cpu_median_s']:.3f} | "
                     f"{r['speedup_vs_fp32_cpu']:.2f} | {r['rel_err']:.4f} | {r['cosine']:.6f} |")
    if doc["sampling"]:
        lines += ["", "| sampler | variant | CPU s | latent rel. RMS vs fp32 |", "|---|---|---|---|"]
        lines += [f"| {r['sampler']} | {r['variant']} | {r['cpu_s']:.1f} | {r['rel_rms_vs_fp32']:.4f} |"
                  for r in doc["sampling"]]
    return "\n".join(lines) + "\n"


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("full", "golden", "text-small"), default="golden")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--samplers", default="fast,heun64", help=f"comma-separated subset of {list(SAMPLERS)}, or ''")
    p.add_argument("--forward-variants", default="fp32,bf16,int8",
                   help="variants whose forward is timed (fp32 always is: it is the reference; drop bf16 on a CPU "
                   "without native bf16, where it is emulated and very slow)")
    p.add_argument("--sample-variants", default="fp32,bf16,int8",
                   help="variants that sample (fp32 always does: it is the reference)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, help="result JSON (default bench/results/int8_<model>.json)")
    args = p.parse_args(argv)
    args.sampler_list = [s for s in args.samplers.split(",") if s]
    unknown = [s for s in args.sampler_list if s not in SAMPLERS]
    if unknown:
        p.error(f"unknown sampler(s) {unknown}; valid: {list(SAMPLERS)}")
    return args


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    doc: Dict[str, Any] = {"model": args.model, "threads": args.threads, "system": system_info(torch.device("cpu"))}
    model, inputs, diffusion, embedding = build(args.model)
    table = variants(model)
    timed = {name: v for name, v in table.items() if name == "fp32" or name in args.forward_variants.split(",")}
    doc["forward"] = forward_rows(timed, inputs, args.repeats, args.warmup)
    print(markdown({**doc, "sampling": [], "loadavg_end": None}), flush=True)
    sampling = {name: v for name, v in table.items() if name == "fp32" or name in args.sample_variants.split(",")}
    doc["sampling"] = sample_rows(sampling, diffusion, embedding, args.sampler_list, GUIDANCE[args.model],
                                  GUIDANCE_MAX_SIGMA.get(args.model))
    doc["loadavg_end"] = list(__import__("os").getloadavg())
    out = args.out or RESULTS / f"int8_{args.model}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, json.dumps(doc, indent=1))
    print(markdown(doc))
    return doc


if __name__ == "__main__":
    main()
