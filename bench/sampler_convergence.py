"""How fast do the Karras-path samplers approach a 128-step Heun reference?

Run from the repository root: `python -m bench.sampler_convergence`. Uses the small random-weight
text model of the golden file d (tests/golden/d_sample_latents.pt), its two text embeddings,
guidance 3 and one seed; prints a Markdown table and writes bench/results/sampler_convergence.json.
"""
import json
import time
from pathlib import Path

import torch

from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.diffusion.sample import sample_latents
from shap_e.models.configs import model_from_config
from shap_e.util.atomic import write_atomic

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "d_sample_latents.pt"
RESULTS = ROOT / "bench" / "results" / "sampler_convergence.json"
SAMPLERS = ("dpmpp_2m", "euler", "heun")
STEPS = (8, 12, 16, 24, 32, 64)
REFERENCE_STEPS = 128
GUIDANCE = 3.0
SEED = 0


def _sample(model, diffusion, embeddings, sampler: str, steps: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(SEED)
    return sample_latents(
        batch_size=len(embeddings), model=model, diffusion=diffusion,
        model_kwargs=dict(embeddings=embeddings), guidance_scale=GUIDANCE, clip_denoised=True, use_fp16=False,
        use_karras=True, karras_steps=steps, sigma_min=1e-3, sigma_max=160, s_churn=0.0, sampler=sampler,
        generator=generator,
    )


def _evaluations(sampler: str, steps: int) -> int:
    return 2 * steps - 1 if sampler == "heun" else steps


def seconds_per_evaluation(model, embeddings, dtype: torch.dtype, repeats: int = 20) -> float:
    """Median seconds of one guided model evaluation (conditional + unconditional rows, one call)."""
    x = torch.randn(2 * len(embeddings), model.d_latent, generator=torch.Generator().manual_seed(SEED))
    t = torch.full((len(x),), 500)
    emb = torch.cat([embeddings, torch.zeros_like(embeddings)])
    times = []
    with torch.inference_mode(), torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        for _ in range(repeats + 2):
            start = time.perf_counter()
            model(x, t, embeddings=emb)
            times.append(time.perf_counter() - start)
    return sorted(times[2:])[repeats // 2]


def run() -> dict:
    """Measure every (sampler, steps) pair; returns the JSON-ready result dict."""
    golden = torch.load(GOLDEN, weights_only=True)
    model = model_from_config(golden["config"]["text_model"])
    model.load_state_dict(golden["state_dict"]["text_model"])
    model.eval()
    diffusion = diffusion_from_config(golden["config"]["diffusion"])
    embeddings = golden["inputs"]["text_embeddings"]
    reference = _sample(model, diffusion, embeddings, "heun", REFERENCE_STEPS)
    rows = []
    for sampler in SAMPLERS:
        for steps in STEPS:
            start = time.perf_counter()
            out = _sample(model, diffusion, embeddings, sampler, steps)
            diff = out - reference
            rows.append(dict(sampler=sampler, steps=steps,
                             model_evaluations=_evaluations(sampler, steps),
                             max_abs=diff.abs().max().item(),
                             rms=diff.pow(2).mean().sqrt().item(),
                             seconds=time.perf_counter() - start))
    per_eval = {str(d).replace("torch.", ""): seconds_per_evaluation(model, embeddings, d)
                for d in (torch.float32, torch.bfloat16)}
    return dict(reference=f"heun {REFERENCE_STEPS} steps", guidance_scale=GUIDANCE, seed=SEED,
                batch_size=len(embeddings), torch=torch.__version__, threads=torch.get_num_threads(),
                seconds_per_evaluation=per_eval,
                reference_rms=reference.pow(2).mean().sqrt().item(), rows=rows)


def to_markdown(result: dict) -> str:
    """The result as a Markdown table (one row per sampler and step count)."""
    lines = [f"Distance to {result['reference']} (guidance {result['guidance_scale']}, "
             f"seed {result['seed']}, reference RMS {result['reference_rms']:.3f})", "",
             "| sampler | steps | model evals | max abs | RMS |", "|---|---|---|---|---|"]
    for row in result["rows"]:
        lines.append(f"| {row['sampler']} | {row['steps']} | {row['model_evaluations']} | "
                     f"{row['max_abs']:.4f} | {row['rms']:.4f} |")
    per_eval = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in result["seconds_per_evaluation"].items())
    lines += ["", f"Seconds per guided evaluation of this model ({result['threads']} thread): {per_eval}"]
    return "\n".join(lines)


def main() -> None:
    torch.set_num_threads(1)
    result = run()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(RESULTS, json.dumps(result, indent=2))
    print(to_markdown(result))


if __name__ == "__main__":
    main()
