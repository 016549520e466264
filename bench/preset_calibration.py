"""Calibrate the `fast` sampling preset: how few DPM-Solver++(2M) steps stay close to 64-step Heun?

    python -m bench.preset_calibration --model text-small --prompts "a red cube" "a chair" \\
        --seeds 0 1 --steps 8 12 16 24 32 --guidance 3 --threshold 0.05

For every prompt (or image) and seed, the reference is the latent of the official setting (Heun,
64 steps, σ in [1e-3, 160]); each candidate runs DPM-Solver++(2M) from the *same* initial noise
(one generator per sample), so the distance measures solver error only. Per step count it reports
the RMS distance to the reference, the same relative to the reference's own RMS, the model
evaluations and the time. The pick is the fewest steps whose worst sample stays within
`--threshold` relative RMS. Writes `preset_calibration_<model>_<time>.json` and `.md` to
`--out-dir` and prints the table; set `shap_e.diffusion.presets.FAST_STEPS` from the pick.
"""
import argparse
import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from shap_e.diffusion.gaussian_diffusion import GaussianDiffusion
from shap_e.diffusion.presets import get_preset
from shap_e.diffusion.sample import sample_latents
from shap_e.util.atomic import write_atomic

ROOT = Path(__file__).resolve().parent.parent
CANDIDATE_SAMPLER = "dpmpp_2m"
DEFAULT_STEPS = (8, 12, 16, 24, 32)
DEFAULT_THRESHOLD = 0.05
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _sample(model, diffusion, model_kwargs, seeds, guidance, sampler, steps, device, dtype):
    """`[rows, d_latent]` float32 latents on the CPU and the wall-clock seconds they took."""
    reference = get_preset("default")
    generators = [torch.Generator().manual_seed(s) for s in seeds]
    start = time.perf_counter()
    latents = sample_latents(
        batch_size=len(seeds), model=model, diffusion=diffusion, model_kwargs=model_kwargs,
        guidance_scale=guidance, clip_denoised=True, use_fp16=False, use_karras=True, karras_steps=steps,
        sigma_min=reference.sigma_min, sigma_max=reference.sigma_max, s_churn=0.0, device=device,
        sampler=sampler, generator=generators, dtype=dtype,
    ).cpu()  # reading back to the host also waits for an accelerator to finish
    return latents, time.perf_counter() - start


def _rms(x: torch.Tensor) -> torch.Tensor:
    """`[rows, d]` -> `[rows]` root mean square over the latent."""
    return x.double().pow(2).mean(dim=1).sqrt()


def _evaluations(sampler: str, steps: int) -> int:
    return 2 * steps - 1 if sampler == "heun" else steps


def calibrate(
    model: torch.nn.Module,
    diffusion: GaussianDiffusion,
    model_kwargs: Dict[str, Any],
    labels: Sequence[str],
    seeds: Sequence[int],
    steps: Sequence[int] = DEFAULT_STEPS,
    guidance: float = 3.0,
    threshold: float = DEFAULT_THRESHOLD,
    reference_steps: int = 64,
    device: Optional[torch.device] = None,
    dtype: Optional[torch.dtype] = None,
) -> Dict[str, Any]:
    """Distances of DPM-Solver++(2M) latents to Heun `reference_steps` latents, one row per step count.

    :param model_kwargs: conditioning with one entry per sample row (`texts=`, `images=` or
        `embeddings=`), aligned with `labels` and `seeds` (`[rows]` each).
    :param threshold: the largest acceptable worst-case relative RMS distance.
    :return: JSON-ready dict; `chosen_steps` is the fewest steps within `threshold` (None if none).
    """
    if not (len(labels) == len(seeds) > 0):
        raise ValueError(
            f"labels and seeds must be equally long and non-empty, got {len(labels)} and {len(seeds)}"
        )
    if threshold <= 0:
        raise ValueError(f"threshold must be > 0 (a relative RMS such as 0.05), got {threshold}")
    args = (model, diffusion, model_kwargs, seeds, guidance)
    reference, ref_seconds = _sample(*args, "heun", reference_steps, device, dtype)
    ref_rms = _rms(reference)
    rows = []
    for n in sorted(set(steps)):
        latents, seconds = _sample(*args, CANDIDATE_SAMPLER, n, device, dtype)
        rms = _rms(latents - reference)
        relative = rms / ref_rms
        rows.append(dict(
            sampler=CANDIDATE_SAMPLER, steps=n, model_evaluations=_evaluations(CANDIDATE_SAMPLER, n),
            seconds=seconds, seconds_per_sample=seconds / len(seeds), rms_max=rms.max().item(),
            rms_mean=rms.mean().item(), relative_rms_max=relative.max().item(),
            relative_rms_mean=relative.mean().item(), relative_rms=relative.tolist(),
            within=relative.max().item() <= threshold,
        ))
    chosen = next((r["steps"] for r in rows if r["within"]), None)
    ref_evals = _evaluations("heun", reference_steps)
    return dict(
        guidance_scale=guidance, threshold_relative_rms=threshold, chosen_steps=chosen,
        evaluation_ratio=None if chosen is None else ref_evals / _evaluations(CANDIDATE_SAMPLER, chosen),
        reference=dict(sampler="heun", steps=reference_steps, model_evaluations=ref_evals,
                       seconds=ref_seconds, seconds_per_sample=ref_seconds / len(seeds)),
        samples=[dict(label=lab, seed=s, reference_rms=r)
                 for lab, s, r in zip(labels, seeds, ref_rms.tolist())],
        rows=rows, torch=torch.__version__, threads=torch.get_num_threads(),
        device=str(device or "cpu"), dtype=str(dtype or torch.float32).replace("torch.", ""),
    )


def to_markdown(result: Dict[str, Any]) -> str:
    """The result as a Markdown table (one row per step count) and the pick."""
    ref = result["reference"]
    lines = [
        f"DPM-Solver++(2M) vs Heun {ref['steps']} steps ({ref['model_evaluations']} evaluations, "
        f"{ref['seconds_per_sample']:.2f} s/sample); guidance {result['guidance_scale']}, "
        f"{len(result['samples'])} samples, {result['device']} {result['dtype']}, "
        f"{result['threads']} threads",
        "",
        "| steps | model evals | s/sample | RMS max | RMS mean | rel. RMS max | rel. RMS mean | within |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['steps']} | {r['model_evaluations']} | {r['seconds_per_sample']:.2f} | "
            f"{r['rms_max']:.4f} | "
            f"{r['rms_mean']:.4f} | {r['relative_rms_max']:.4f} | {r['relative_rms_mean']:.4f} | "
            f"{'yes' if r['within'] else 'no'} |"
        )
    limit = f"worst-case relative RMS <= {result['threshold_relative_rms']}"
    if result["chosen_steps"] is None:
        lines += ["", f"No candidate is within {limit}; try more steps or a looser threshold."]
    else:
        lines += ["", f"Fewest steps within {limit}: **{result['chosen_steps']}** "
                      f"({result['evaluation_ratio']:.1f}x fewer model evaluations than the reference)."]
    return "\n".join(lines)


def load_prior(
    name: str, device: torch.device, cache_dir: Optional[str]
) -> Tuple[torch.nn.Module, GaussianDiffusion]:
    """A registered prior and the diffusion its registry entry names."""
    from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
    from shap_e.models.download import load_config, load_model
    from shap_e.models.registry import get_spec

    model = load_model(name, device=device, cache_dir=cache_dir)
    return model, diffusion_from_config(load_config(get_spec(name).diffusion))


def _conditions(args) -> Tuple[Dict[str, Any], List[str], List[int]]:
    """Rows = every (prompt or image) x seed; model kwargs with one entry per row."""
    if args.prompts:
        items, key = list(args.prompts), "texts"
    else:
        from PIL import Image

        items, key = [Image.open(p).convert("RGB") for p in args.images], "images"
    names = args.prompts or [Path(p).name for p in args.images]
    pairs = [(i, s) for i in range(len(items)) for s in args.seeds]
    return {key: [items[i] for i, _ in pairs]}, [names[i] for i, _ in pairs], [s for _, s in pairs]


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.preset_calibration",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="registered prior, e.g. text-small or text300M")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--prompts", nargs="+", help="text prompts (text-conditioned priors)")
    what.add_argument("--images", nargs="+", help="image files (image-conditioned priors)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--steps", nargs="+", type=int, default=list(DEFAULT_STEPS),
                        help="DPM++(2M) step counts")
    parser.add_argument("--guidance", type=float, default=3.0)
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help="largest worst-case RMS distance relative to the reference's RMS")
    parser.add_argument("--reference-steps", type=int, default=get_preset("default").karras_steps)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), help="model autocast dtype (default float32)")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--cache-dir", help="model cache")
    parser.add_argument("--out-dir", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    if min(args.steps) < 2 or args.reference_steps < 2:
        parser.error("--steps and --reference-steps must all be at least 2")
    return args


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Path]:
    """Run the calibration from the command line; returns the written `{"json", "md"}` paths."""
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    model, diffusion = load_prior(args.model, device, args.cache_dir)
    model_kwargs, labels, seeds = _conditions(args)
    result = calibrate(model, diffusion, model_kwargs, labels, seeds, args.steps, args.guidance,
                       args.threshold, args.reference_steps, device, DTYPES.get(args.dtype))
    result["model"] = args.model
    stem = f"preset_calibration_{args.model}_{time.strftime('%Y%m%d-%H%M%S')}"
    paths = {"json": Path(args.out_dir) / f"{stem}.json", "md": Path(args.out_dir) / f"{stem}.md"}
    markdown = f"## `{args.model}`\n\n" + to_markdown(result)
    Path(args.out_dir).mkdir(parents=True, exist_ok=True)
    write_atomic(paths["json"], json.dumps(result, indent=2) + "\n")
    write_atomic(paths["md"], markdown + "\n")
    print(markdown)
    return paths


if __name__ == "__main__":
    main()
