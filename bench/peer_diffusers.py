"""The peer: diffusers' Shap-E pipeline beside this package, same shapes, same random weights, one process.

Usage: `python -m bench.peer_diffusers [--only step,sample,mesh] [--repeats 3] [--warmup 1] [--threads 1]`
(or `python -m bench --peer diffusers`); needs the `peer` extra (`pip install diffusers`).

Both sides get the same full-size random weights: text300M from `bench.stages._text_setup`, mapped onto
diffusers' `PriorTransformer` (`prior_config`: Shap-E's configuration), and the release decoder from
`bench.decode.build_decoder`, mapped onto `ShapERenderer`; a freshly built `ShapERenderer` has all-zero
marching-cubes tables (its checkpoint fills them), so they are filled from the standard table
(`shap_e.rendering.mc_table`). With the same weights the two compute the same functions, which each
part checks (`max_rel_diff`) before it times anything:

* `step`: one prior evaluation at batch 2 (a guided step), float32; this package also in int8.
  The variants run in turn, `warmup` untimed and `repeats` timed rounds.
* `sample`: the whole 64-step Heun sample at guidance 15: `sample_latents` against `ShapEPipeline`
  with `output_type="latent"` (its prompt encoder replaced by the same unit embedding); one run each.
* `mesh`: decoding a latent to a mesh at each side's default grid (128): `decode_latent_mesh` against
  `ShapERenderer.decode_to_mesh`, interleaved; the latent makes the random decoder's SDF a sphere
  (`bench.decode.load_latent("structured")`), a surface like a trained model's.

Results: printed as Markdown and written to `bench/results/peer_diffusers.json`.
"""
import argparse
import json
import math
import os
import statistics
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch

from bench.int8 import interleaved
from bench.measure import proc_status_mb, reset_peak_rss, system_info
from shap_e.util.atomic import write_atomic

RESULTS = Path(__file__).resolve().parent / "results" / "peer_diffusers.json"
PARTS = ("step", "sample", "mesh")
GUIDANCE = 15.0
STEPS = 64
SEED = 0
# Shap-E's scheduler in diffusers (Karras sigmas, x0 prediction clipped to [-1, 1]).
SCHEDULER_CONFIG = dict(beta_schedule="exp", num_train_timesteps=1024, prediction_type="sample",
                        use_karras_sigmas=True, clip_sample=True, clip_sample_range=1.0)


def prior_state(ours: Dict[str, torch.Tensor], heads: int) -> Dict[str, torch.Tensor]:
    """This package's SplitVectorDiffusion (text) state dict under diffusers' PriorTransformer names.

    `c_qkv` holds, per head, its query, key and value rows one after another; diffusers keeps three
    matrices, so the rows are regrouped by part.
    """
    rename = {"time_embed.c_fc": "time_embedding.linear_1", "time_embed.c_proj": "time_embedding.linear_2",
              "input_proj": "proj_in", "clip_embed": "embedding_proj", "ln_pre": "norm_in", "ln_post": "norm_out",
              "output_proj": "proj_to_clip_embeddings"}
    block = {"attn.c_proj": "attn1.to_out.0", "mlp.c_fc": "ff.net.0.proj", "mlp.c_proj": "ff.net.2",
             "ln_1": "norm1", "ln_2": "norm3"}
    out = {"positional_embedding": ours["wrapped.pos_emb"][None]}
    for key, tensor in ours.items():
        name, _, leaf = key[len("wrapped."):].rpartition(".")
        if name in rename:
            out[f"{rename[name]}.{leaf}"] = tensor
        elif name.startswith("backbone.resblocks."):
            index, _, inner = name[len("backbone.resblocks."):].partition(".")
            prefix = f"transformer_blocks.{index}"
            if inner == "attn.c_qkv":
                parts = tensor.reshape(heads, 3, -1, *tensor.shape[1:]).unbind(1)  # [heads, d, ...] each
                for part, letter in zip(parts, "qkv"):
                    out[f"{prefix}.attn1.to_{letter}.{leaf}"] = part.reshape(-1, *tensor.shape[1:])
            else:
                out[f"{prefix}.{block[inner]}.{leaf}"] = tensor
    return out


def renderer_state(ours: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """This package's ChannelsDecoder state dict under diffusers' ShapERenderer names (no MC tables)."""
    out = {}
    for key, tensor in ours.items():
        if key.startswith("params_proj."):
            out[key] = tensor
        elif key.startswith("renderer.nerstf.mlp."):
            out["mlp.mlp." + key[len("renderer.nerstf.mlp."):]] = tensor
    return out


def prior_config(ours: torch.nn.Module) -> Dict[str, Any]:
    """diffusers' `PriorTransformer` arguments for a text-conditioned prior of this package; for
    text300M they are the hub's openai/shap-e prior configuration."""
    wrapped = ours.wrapped
    heads = wrapped.backbone.resblocks[0].attn.heads
    return dict(num_attention_heads=heads, attention_head_dim=wrapped.width // heads,
                num_layers=len(wrapped.backbone.resblocks), embedding_dim=wrapped.input_channels,
                num_embeddings=wrapped.n_ctx, additional_embeddings=0, time_embed_act_fn="gelu",
                norm_in_type="layer", encoder_hid_proj_type=None, added_emb_type=None,
                time_embed_dim=4 * wrapped.width, embedding_proj_dim=wrapped.cond_width,
                clip_embed_dim=wrapped.output_channels)


def build_prior(ours: torch.nn.Module) -> torch.nn.Module:
    """diffusers' PriorTransformer holding `ours`'s weights (`clip_mean`/`clip_std` are unused by the pipeline)."""
    from diffusers import PriorTransformer

    config = prior_config(ours)
    prior = PriorTransformer(**config)
    missing, unexpected = prior.load_state_dict(prior_state(ours.state_dict(), config["num_attention_heads"]),
                                                strict=False)
    if unexpected or set(missing) - {"clip_mean", "clip_std"}:
        raise RuntimeError(f"weight mapping: missing {missing[:4]}, unexpected {unexpected[:4]}")
    return prior.eval()


def build_renderer(decoder: torch.nn.Module) -> torch.nn.Module:
    """diffusers' ShapERenderer holding `decoder`'s weights, its marching-cubes tables filled."""
    from diffusers.pipelines.shap_e import ShapERenderer

    from shap_e.rendering.mc_table import triangle_table

    renderer = ShapERenderer()
    cases, masks = triangle_table()
    state = {**renderer_state(decoder.state_dict()), "mesh_decoder.cases": cases, "mesh_decoder.masks": masks}
    missing, unexpected = renderer.load_state_dict(state, strict=False)
    leftover = [k for k in missing if not k.startswith(("void.", "volume."))]
    if unexpected or leftover:
        raise RuntimeError(f"weight mapping: missing {leftover[:4]}, unexpected {unexpected[:4]}")
    return renderer.eval()


def their_forward(prior, x: torch.Tensor, t: torch.Tensor, embeddings: torch.Tensor) -> torch.Tensor:
    """diffusers' prior on this package's forward inputs, as `[batch, 2 * d_latent]` like ours."""
    batch, tokens, channels = x.shape[0], prior.config.num_embeddings, prior.config.embedding_dim
    out = prior(x.reshape(batch, tokens, channels), timestep=t, proj_embedding=math.sqrt(embeddings.shape[1]) * embeddings)
    mean, var = out.predicted_image_embedding.split(channels, dim=2)
    return torch.cat([mean.flatten(1), var.flatten(1)], dim=1)


def max_rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


def step_part(ours, theirs, inputs, repeats: int, warmup: int) -> Dict[str, Any]:
    from shap_e.models.quantize import int8_available, quantize_int8

    calls: Dict[str, Callable[[], torch.Tensor]] = {
        "ours fp32": lambda: ours(inputs["x"], inputs["t"], embeddings=inputs["embeddings"]),
        "diffusers fp32": lambda: their_forward(theirs, inputs["x"], inputs["t"], inputs["embeddings"]),
    }
    if int8_available():
        import copy

        ours_int8 = quantize_int8(copy.deepcopy(ours))
        calls["ours int8"] = lambda: ours_int8(inputs["x"], inputs["t"], embeddings=inputs["embeddings"])
    with torch.inference_mode():
        times, outputs = interleaved(calls, repeats, warmup)
    rows = {name: {"wall_median_s": statistics.median(times[name]["wall"]), "wall_s": times[name]["wall"],
                   "cpu_median_s": statistics.median(times[name]["cpu"]), "cpu_s": times[name]["cpu"]}
            for name in calls}
    return {"rows": rows, "max_rel_diff": max_rel_diff(outputs["diffusers fp32"], outputs["ours fp32"])}


def sample_part(ours, theirs, embedding: torch.Tensor) -> Dict[str, Any]:
    """One 64-step Heun sample each from one unit embedding `[1, 768]`; times and the latents' distance."""
    import time

    from diffusers import HeunDiscreteScheduler, ShapEPipeline

    from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
    from bench.stages import read_yaml

    pipe = ShapEPipeline(prior=theirs, text_encoder=None, tokenizer=None, shap_e_renderer=None,
                         scheduler=HeunDiscreteScheduler(**SCHEDULER_CONFIG))
    pipe.set_progress_bar_config(disable=True)
    # the pipeline's own prompt path (tokenizer + CLIP) is replaced by the embedding, scaled as it scales it
    conditioning = math.sqrt(768) * torch.cat([torch.zeros_like(embedding), embedding])
    pipe._encode_prompt = lambda *args, **kwargs: conditioning
    diffusion = diffusion_from_config(read_yaml("diffusion_config.yaml"))
    from shap_e.diffusion.sample import sample_latents

    runs = {
        "ours fp32": lambda: sample_latents(batch_size=1, model=ours, diffusion=diffusion,
                                            model_kwargs={"embeddings": embedding}, guidance_scale=GUIDANCE,
                                            generator=torch.Generator().manual_seed(SEED)),
        "diffusers fp32": lambda: pipe("a red chair", num_inference_steps=STEPS, guidance_scale=GUIDANCE,
                                       output_type="latent", generator=torch.Generator().manual_seed(SEED)).images,
    }
    rows = {}
    for name, run in runs.items():
        wall, cpu = time.perf_counter(), time.process_time()
        latent = run()
        rows[name] = {"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                      "finite": bool(torch.isfinite(latent).all())}
        print(f"[peer] sample {name}: {rows[name]['wall_s']:.1f} s", flush=True)
    return {"rows": rows, "steps": STEPS, "model_evals": 2 * STEPS - 1}


def mesh_part(decoder, renderer, latent: torch.Tensor, repeats: int, warmup: int) -> Dict[str, Any]:
    from shap_e.models.decode import decode_latent_mesh

    tokens = latent.view(1, decoder.latent_ctx, -1)  # the pipeline hands its renderer [1, tokens, channels]
    calls = {"ours": lambda: decode_latent_mesh(decoder, latent),
             "diffusers": lambda: renderer.decode_to_mesh(tokens, latent.device)}
    peaks = {}

    def with_peak(name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
        def run():
            before = proc_status_mb("VmRSS")
            reset_peak_rss()
            out = fn()
            peaks.setdefault(name, []).append((proc_status_mb("VmHWM") or 0.0) - (before or 0.0))
            return out
        return run

    with torch.no_grad():
        times, meshes = interleaved({name: with_peak(name, fn) for name, fn in calls.items()}, repeats, warmup)
    rows = {name: {"wall_median_s": statistics.median(times[name]["wall"]), "wall_s": times[name]["wall"],
                   "cpu_median_s": statistics.median(times[name]["cpu"]),
                   "peak_above_resident_mb": max(peaks[name]),
                   "faces": int(meshes[name].faces.shape[0]), "verts": int(meshes[name].verts.shape[0])}
            for name in calls}
    return {"rows": rows, "grid": 128}


def versions() -> Dict[str, str]:
    import diffusers
    import transformers

    return {"diffusers": diffusers.__version__, "transformers": transformers.__version__, "torch": torch.__version__}


def run(parts: List[str], repeats: int, warmup: int, out: Path) -> Dict[str, Any]:
    from bench.decode import load_latent
    from bench.stage_types import Context
    from bench.stages import _text_setup

    doc: Dict[str, Any] = {"versions": versions(), "system": system_info(torch.device("cpu")),
                           "threads": torch.get_num_threads()}
    if "step" in parts or "sample" in parts:
        _, ours, inputs = _text_setup(Context(device=torch.device("cpu"), seed=SEED))
        theirs = build_prior(ours)
        if "step" in parts:
            doc["step"] = step_part(ours, theirs, inputs, repeats, warmup)
            save(doc, out)
        if "sample" in parts:
            doc["sample"] = sample_part(ours, theirs, inputs["embeddings"][:1])
            save(doc, out)
        del ours, theirs
    if "mesh" in parts:
        decoder, latent = load_latent("structured", 128, SEED, torch.device("cpu"))
        doc["mesh"] = mesh_part(decoder, build_renderer(decoder), latent, repeats, warmup)
    save(doc, out)
    return doc


def save(doc: Dict[str, Any], out: Path) -> None:
    """Write the results so far (each part is saved as it ends) and print their table."""
    doc["loadavg_end"] = list(os.getloadavg())
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, json.dumps(doc, indent=1))
    print(markdown(doc), flush=True)


def markdown(doc: Dict[str, Any]) -> str:
    s, v = doc["system"], doc["versions"]
    lines = [f"diffusers {v['diffusers']}, transformers {v['transformers']}, torch {v['torch']}; CPU {s['cpu_model']} "
             f"(avx512_bf16={s['avx512_bf16']}), {doc['threads']} thread(s); load average {s['loadavg']} -> "
             f"{doc.get('loadavg_end')}", "",
             "| part | variant | wall s (median) | CPU s (median) | vs diffusers (CPU s) | notes |", "|---|---|---|---|---|---|"]
    for part in PARTS:
        if part not in doc:
            continue
        result, reference = doc[part], "diffusers fp32" if part != "mesh" else "diffusers"
        base = result["rows"][reference].get("cpu_median_s", result["rows"][reference].get("cpu_s"))
        for name, row in result["rows"].items():
            cpu = row.get("cpu_median_s", row.get("cpu_s"))
            wall = row.get("wall_median_s", row.get("wall_s"))
            notes = {k: row[k] for k in ("faces", "verts", "peak_above_resident_mb") if k in row}
            if "max_rel_diff" in result and name == reference:
                notes["max_rel_diff_vs_ours"] = f"{result['max_rel_diff']:.2e}"
            lines.append(f"| {part} | {name} | {wall:.2f} | {cpu:.2f} | {base / cpu:.2f}x | {notes or ''} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=",".join(PARTS), help=f"comma-separated subset of {PARTS}")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    args.parts = [part for part in args.only.split(",") if part]
    if not args.parts or set(args.parts) - set(PARTS):
        p.error(f"--only takes a comma-separated subset of {PARTS}, got {args.only!r}")
    return args


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    args = parse_args(argv)
    try:
        import diffusers  # noqa: F401
    except ImportError:
        raise SystemExit("the peer benchmark needs diffusers: pip install 'shap-e[peer]' (or pip install diffusers)")
    torch.set_num_threads(args.threads)
    return run(args.parts, args.repeats, args.warmup, args.out)


if __name__ == "__main__":
    main()
