"""Decoder benchmark: full-size NeRSTF renderer with random weights, latent -> mesh / images.

Usage: `python -m bench.decode [--latent noise|structured] [--threads 1] [--repeats 3] [--warmup 1]
[--only mesh128 ...]`. Two latents of the same random decoder:
- "noise": a random latent in (-1, 1); its field is noise, with surface in nearly every cell (the
  worst case for meshing: millions of faces, and the narrow band covers the whole grid).
- "structured": a latent fitted (Adam, `FIT_STEPS` steps of 2048 points, ~2 min on one core) so
  that the SDF head approximates a sphere of radius 0.5: a smooth shape like a trained model's.
  It is cached in `bench/results/structured_sphere_seed<seed>.pt`.
Stages: `decode_latent_mesh` at grid 128 (fast, exact, fast+bf16) and 256 (fast); `mesh128_plain`, the
reference's algorithm written plainly (`plain_mesh`: the baseline for the exact mode); NeRF 4 pan views
at 64x64 (default "auto" precision, float32, the reference's queries, and bf16); STF 20 pan views at
128x128 (grid 128); `agree128`: fast vs exact vs bf16 vs plain meshes at grid 128 compared, and
`agree_nerf`: bf16 vs float32 NeRF images compared (one run each, not timed).
Each timed stage reports the median (and min) wall time of `repeats` runs after `warmup` untimed
runs, and the peak RSS of the timed runs (`VmHWM`, reset after building, so the model is
included). Results are printed and merged into `bench/results/decode.json` (one row per stage
and latent).
"""
import argparse
import copy
import json
import math
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch
import yaml

from bench.measure import measure, proc_status_mb, reset_peak_rss
from shap_e.models.configs import model_from_config
from shap_e.rendering.cameras import ProjectiveCamera, create_pan_cameras
from shap_e.util.atomic import write_atomic, write_atomic_with
from shap_e.util.precision import resolve_query_dtype

CONFIG = Path(__file__).resolve().parents[1] / "shap_e" / "configs" / "vector_decoder_config.yaml"
RESULTS = Path(__file__).resolve().parent / "results" / "decode.json"
LATENTS = ("noise", "structured")
FIT_STEPS = 300
SPHERE_RADIUS = 0.5
# name -> (grid size, mesh_mode, query dtype)
MESH_STAGES = {
    "mesh128": (128, "fast", None), "mesh128_exact": (128, "exact", None),
    "mesh128_bf16": (128, "fast", torch.bfloat16), "mesh256": (256, "fast", None),
}
# name -> (mode, image size, number of pan views, reference_queries, query dtype)
# "auto" is `decode_latent_images`' default (bf16 where native, see shap_e.util.precision).
VIEW_STAGES = {
    "nerf4x64": ("nerf", 64, 4, False, "auto"), "nerf4x64_fp32": ("nerf", 64, 4, False, None),
    "nerf4x64_reference": ("nerf", 64, 4, True, None), "nerf4x64_bf16": ("nerf", 64, 4, False, torch.bfloat16),
    "stf20x128": ("stf", 128, 20, False, None),
}
STAGES = (*MESH_STAGES, "mesh128_plain", *VIEW_STAGES, "agree128", "agree_nerf")


def build_decoder(grid_size: int, seed: int, device: torch.device):
    """The release ChannelsDecoder with random weights and one random latent in (-1, 1)."""
    with open(CONFIG) as f:
        config = copy.deepcopy(yaml.safe_load(f))
    config["renderer"]["grid_size"] = grid_size
    torch.manual_seed(seed)
    xm = model_from_config(config, device=device).eval()
    generator = torch.Generator().manual_seed(seed)
    latent = torch.rand(config["latent_ctx"] * config["d_latent"], generator=generator) * 2 - 1
    return xm, latent.to(device)


def fit_sphere_latent(xm, latent: torch.Tensor, seed: int, steps: int = FIT_STEPS) -> torch.Tensor:
    """Adam on the latent so that the SDF head matches `0.5 - |p|` (uniform + near-surface points)."""
    generator = torch.Generator().manual_seed(seed)
    fitted = latent.detach().clone()[None].requires_grad_(True)
    optimizer = torch.optim.Adam([fitted], lr=0.02)
    frozen = [p for p in xm.parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        for _ in range(steps):
            uniform = torch.rand(1024, 3, generator=generator) * 2 - 1
            normal = torch.nn.functional.normalize(torch.randn(1024, 3, generator=generator), dim=1)
            shell = normal * (SPHERE_RADIUS + 0.1 * torch.randn(1024, 1, generator=generator))
            points = torch.cat([uniform, shell]).to(latent.device)[None]
            target = SPHERE_RADIUS - points.norm(dim=-1, keepdim=True)
            params = {k[len("nerstf."):]: v for k, v in xm.bottleneck_to_params(fitted).items()}
            sdf = xm.renderer.nerstf.query(points, params, heads=("sdf",)).sdf
            loss = ((sdf - target) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        for p in frozen:
            p.requires_grad_(True)
    return fitted.detach()[0]


def plain_field(xm, params: Dict[str, torch.Tensor]):
    """The NeRSTF field as docs/behaviour.md#nerstf-mlp describes the reference computing it, written plainly (the
    baseline of `mesh128_plain`, as `bench.stages.eager_attention` is for the transformer): all 12
    raw outputs at every query, 51 zero direction features concatenated before layer 4, float32.
    Returns a `shap_e.rendering.fields.FieldFn` of the heads the mesh needs (sdf, color_stf)."""
    from shap_e.rendering.fields import NeRSTFOutput

    layers = xm.renderer.nerstf.mlp
    weights = xm.renderer.mlp_params(params)
    scales = 2.0 ** torch.arange(15, dtype=torch.float32, device=layers[-1].bias.device)

    def field(position, direction, heads):
        xb = (position[..., None, :] * scales[:, None]).flatten(-2)  # [batch, n, 15 * 3], index j * 3 + c
        h = torch.cat([position, torch.sin(xb), torch.sin(xb + math.pi / 2)], dim=-1)
        for i, layer in enumerate(layers):
            if i == 4:
                h = torch.cat([h, h.new_zeros(*h.shape[:-1], 51)], dim=-1)
            weight = weights.get(f"mlp.{i}.weight", layer.weight.expand(h.shape[0], -1, -1))
            h = h @ weight.transpose(1, 2) + layer.bias
            if i < len(layers) - 1:
                h = h * torch.sigmoid(h)
        return NeRSTFOutput(sdf=torch.tanh(h[..., 0:1]), density_fine=torch.relu(h[..., 2:3]),
                            color_stf=torch.sigmoid(h[..., 3:6]))

    return field


def plain_mesh(xm, params: Dict[str, torch.Tensor], grid_size: int, chunk: int = 4096):
    """The reference's mesh algorithm (docs/behaviour.md#stf-meshes) on `plain_field`: every one of the G³ samples
    queried, `chunk` points per call, then the package's marching cubes and vertex colours."""
    from shap_e.rendering.stf import color_meshes, meshes_from_fields, query_sdf_grid

    field = plain_field(xm, params)
    box = xm.renderer.box.to(params["nerstf.mlp.0.weight"].device)
    grid = query_sdf_grid(field, 1, grid_size, box, chunk, box.bbox_min.device)
    meshes, _ = meshes_from_fields(grid.fields, box)
    return color_meshes(field, meshes, chunk)[0]


def load_latent(kind: str, grid_size: int, seed: int, device: torch.device):
    """The decoder and the `kind` latent ("noise" or "structured", fitted once and cached)."""
    xm, latent = build_decoder(grid_size, seed, device)
    if kind == "noise":
        return xm, latent
    path = RESULTS.parent / f"structured_sphere_seed{seed}.pt"
    if path.exists():
        return xm, torch.load(path, weights_only=True).to(device)
    latent = fit_sphere_latent(xm, latent, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic_with(path, lambda tmp: torch.save(latent.cpu(), tmp))
    return xm, latent


def pan_views(size: int, n_views: int, device: torch.device) -> ProjectiveCamera:
    """The first `n_views` of the 20 pan cameras, shape `(1, n_views)`."""
    pan = create_pan_cameras(size, device=device)
    return ProjectiveCamera(
        origin=pan.origin[:n_views], x=pan.x[:n_views], y=pan.y[:n_views], z=pan.z[:n_views],
        width=size, height=size, x_fov=pan.x_fov, y_fov=pan.y_fov, shape=(1, n_views),
    )


def stage_fn(name: str, kind: str, seed: int, device: torch.device) -> Callable[[], Dict[str, Any]]:
    """A zero-argument callable running one stage and returning its size facts."""
    if name == "mesh128_plain":
        xm, latent = load_latent(kind, 128, seed, device)

        @torch.no_grad()
        def run_plain() -> Dict[str, Any]:
            mesh = plain_mesh(xm, xm.bottleneck_to_params(latent[None]), 128)
            return {"verts": int(mesh.verts.shape[0]), "faces": int(mesh.faces.shape[0])}

        return run_plain
    if name in MESH_STAGES:
        grid, mesh_mode, dtype = MESH_STAGES[name]
        xm, latent = load_latent(kind, grid, seed, device)

        @torch.no_grad()
        def run_mesh() -> Dict[str, Any]:
            params = xm.bottleneck_to_params(latent[None])
            mesh = xm.renderer.extract_mesh(params, mesh_mode=mesh_mode, query_dtype=dtype)[0]
            return {"verts": int(mesh.verts.shape[0]), "faces": int(mesh.faces.shape[0])}

        return run_mesh
    mode, size, n_views, reference, dtype = VIEW_STAGES[name]
    xm, latent = load_latent(kind, 128, seed, device)
    cameras = pan_views(size, n_views, device)
    dtype = resolve_query_dtype(dtype, device, xm.renderer.nerstf.d_hidden)

    @torch.no_grad()
    def run_views() -> Dict[str, Any]:
        generator = torch.Generator(device=device).manual_seed(seed)
        params = xm.bottleneck_to_params(latent[None])
        out = xm.renderer.render_cameras(
            cameras, params, rendering_mode=mode, generator=generator, reference_queries=reference,
            query_dtype=dtype,
        )
        return {"views": n_views, "size": size, "dtype": str(dtype or torch.float32).replace("torch.", ""),
                "mean_pixel": round(float(out.channels.mean()), 3)}

    return run_views


def agree_nerf(kind: str, seed: int, device: torch.device) -> Dict[str, Any]:
    """NeRF 4 pan views at 64^2 in bf16 against float32 (same generator seed), as the uint8 images
    `decode_latent_images` returns: mean and max absolute difference in levels (0..255)."""
    from shap_e.util.notebooks import decode_latent_images

    xm, latent = load_latent(kind, 128, seed, device)
    cameras = pan_views(64, 4, device)
    images = {
        name: torch.stack([torch.from_numpy(np.array(im)) for im in decode_latent_images(
            xm, latent, cameras, "nerf", generator=torch.Generator(device=device).manual_seed(seed), query_dtype=dtype,
        )]).float()
        for name, dtype in (("fp32", None), ("bf16", torch.bfloat16))
    }
    diff = (images["bf16"] - images["fp32"]).abs()
    return {"stage": "agree_nerf", "mean_abs_levels": round(float(diff.mean()), 4),
            "max_abs_levels": int(diff.max()), "share_over_4_levels": round(float((diff > 4).float().mean()), 5)}


def agree(kind: str, seed: int, device: torch.device, grid: int = 128) -> Dict[str, Any]:
    """Fast vs exact (must be identical) and bf16 vs exact meshes: face counts and vertex distances.

    Vertex distance: for each vertex of one mesh, the nearest vertex of the other (both ways), in
    units of the mesh's grid step (box size / (grid + 1)).
    """
    from scipy.spatial import cKDTree

    xm, latent = load_latent(kind, grid, seed, device)
    with torch.no_grad():
        params = xm.bottleneck_to_params(latent[None])
        meshes = {
            name: xm.renderer.extract_mesh(params, mesh_mode=mode, query_dtype=dtype)[0]
            for name, (mode, dtype) in {
                "exact": ("exact", None), "fast": ("fast", None), "bf16": ("fast", torch.bfloat16)
            }.items()
        }
        plain = plain_mesh(xm, params, grid)
    exact, fast, bf16 = meshes["exact"], meshes["fast"], meshes["bf16"]
    identical = torch.equal(exact.verts, fast.verts) and torch.equal(exact.faces, fast.faces) and all(
        torch.equal(exact.vertex_channels[c], fast.vertex_channels[c]) for c in "RGB"
    )
    a, b = exact.verts.cpu().numpy(), bf16.verts.cpu().numpy()
    step = 2.0 / (grid + 1)
    distances = list(cKDTree(b).query(a)[0]) + list(cKDTree(a).query(b)[0])
    colors = torch.stack([exact.vertex_channels[c] for c in "RGB"], -1)
    return {
        "stage": "agree128", "fast_identical_to_exact": identical, "faces_exact": int(exact.faces.shape[0]),
        "plain_faces_equal_exact": torch.equal(plain.faces, exact.faces),
        "plain_vertex_max_diff": (float((plain.verts - exact.verts).abs().max())
                                  if plain.verts.shape == exact.verts.shape else None),
        "faces_bf16": int(bf16.faces.shape[0]),
        "bf16_vertex_dist_max_steps": round(max(distances) / step, 4),
        "bf16_vertex_dist_mean_steps": round(sum(distances) / len(distances) / step, 5),
        "mean_linear_color": round(float(colors.mean()), 4),
    }


def run_stage(name: str, kind: str, repeats: int, warmup: int, seed: int, device: torch.device) -> Dict[str, Any]:
    """Build, warm up and time one stage; peak RSS covers the timed runs only."""
    if name == "agree128":
        return agree(kind, seed, device)
    if name == "agree_nerf":
        return agree_nerf(kind, seed, device)
    fn = stage_fn(name, kind, seed, device)
    if warmup:
        measure(fn, repeats=1, warmup=warmup - 1, device=device)
    reset_ok = reset_peak_rss()
    timing, facts = measure(fn, repeats=repeats, warmup=0, device=device)
    return {
        "stage": name, "median_s": round(timing.median_s, 3), "min_s": round(timing.min_s, 3),
        "runs_s": [round(r, 3) for r in timing.runs_s], "peak_rss_mib": proc_status_mb("VmHWM"),
        "peak_rss_reset": reset_ok, **facts,
    }


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--latent", choices=LATENTS, default="structured")
    p.add_argument("--only", nargs="*", choices=STAGES, default=list(STAGES))
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> List[Dict[str, Any]]:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rows = []
    for name in args.only:
        row = run_stage(name, args.latent, args.repeats, args.warmup, args.seed, device)
        row.update(latent=args.latent, threads=torch.get_num_threads(), device=str(device), loadavg=_loadavg())
        print(json.dumps(row), flush=True)
        rows.append(row)
    save_rows(rows)
    return rows


def save_rows(rows: List[Dict[str, Any]]) -> None:
    """Merge `rows` into the results file (a new row replaces the old one of its stage and latent), atomically."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    fresh = {(row["stage"], row.get("latent")) for row in rows}
    merged = [row for row in old if (row["stage"], row.get("latent")) not in fresh] + rows
    write_atomic(RESULTS, json.dumps(merged, indent=1))


def _loadavg() -> Optional[str]:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return None


if __name__ == "__main__":
    main()
