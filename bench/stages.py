"""The benchmark stages: name -> setup (build models, inputs) returning the callable to time.

Every stage builds its models from the release configs with seeded random weights (no download).
`Context.tiny` swaps in toy-sized configs so that the harness itself can be tested in seconds;
tiny numbers mean nothing. A stage whose code has not landed raises `StageUnavailable`.
"""
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List

import torch

from bench.flops import text_model_flops
from bench.measure import MATMUL_SIZE, matmul_gflops
from bench.official_e2e import official_text_to_glb
from bench.stage_types import Context, Prepared, Stage, StageUnavailable
from bench.train_steps import SETUPS as TRAIN_STEP_SETUPS

CUDA_MATMUL_SIZE = 8192
CONFIG_DIR = Path(__file__).resolve().parent.parent / "shap_e" / "configs"
GUIDANCE_SCALE = 15.0
TINY_TEXT = {
    "name": "SplitVectorDiffusion", "d_latent": 128, "latent_ctx": 16,
    "inner": {"name": "CLIPImagePointDiffusionTransformer", "width": 32, "layers": 2, "heads": 4,
              "init_scale": 0.25, "time_token_cond": True, "token_cond": True, "use_pos_emb": True,
              "pos_emb_init_scale": 0.05, "cond_drop_prob": 0.1},
}


def read_yaml(name: str) -> Dict[str, Any]:
    from shap_e.util.config import read_config

    return read_config(CONFIG_DIR / name)


def bf16_dtype_for(device: torch.device) -> torch.dtype:
    """bfloat16 where the hardware has it natively (`shap_e.util.precision.native_bf16`), else float32."""
    from shap_e.util.precision import native_bf16

    return torch.bfloat16 if native_bf16(device) else torch.float32


def randomize_zero_init(model: torch.nn.Module, seed: int, std: float = 0.02) -> None:
    """Give zero-initialised weight matrices (e.g. `output_proj`) random values.

    A freshly built model outputs exactly zero, which would make error checks vacuous and the
    sampler trivial; trained weights are not zero, so neither are the benchmark's.
    """
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2 and not param.any():
                param.copy_(torch.randn(param.shape, generator=gen) * std)


def _text_setup(ctx: Context):
    """The text300M model (or a toy one) with random weights, and a guided-step input (batch 2)."""
    from shap_e.models.configs import model_from_config

    config = TINY_TEXT if ctx.tiny else read_yaml("text_cond_config.yaml")
    torch.manual_seed(ctx.seed)
    model = model_from_config(config, device=ctx.device).eval()
    randomize_zero_init(model, ctx.seed)
    gen = torch.Generator().manual_seed(ctx.seed)
    x = torch.randn(2, config["d_latent"], generator=gen).to(ctx.device)
    emb = torch.randn(2, 768, generator=gen)
    emb[1] = 0  # the unconditional row of classifier-free guidance
    inputs = {"x": x, "t": torch.tensor([500, 500], device=ctx.device), "embeddings": emb.to(ctx.device)}
    return config, model, inputs


def _forward(model, inputs: Dict[str, torch.Tensor], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    with torch.inference_mode(), torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
        return model(inputs["x"], inputs["t"], embeddings=inputs["embeddings"]).float()


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention as the reference computes it: q and k scaled by d^(-1/4), a float32 softmax."""
    batch, heads, n_q, d = q.shape
    scale = d ** -0.25
    weights = torch.einsum("bhqd,bhkd->bhqk", q * scale, k * scale)
    weights = torch.softmax(weights.float(), dim=-1).to(weights.dtype)
    return torch.einsum("bhqk,bhkd->bhqd", weights, v).transpose(1, 2).reshape(batch, n_q, heads * d)


def flash_attention_runs(fn: Callable[[], Any]) -> bool:
    """Whether `fn` runs with scaled_dot_product_attention restricted to the flash kernel (CUDA)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    try:
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            fn()
    except RuntimeError:  # "No available kernel": flash cannot serve these inputs
        return False
    return True


def _autocast_dtype(dtype_name: str, device: torch.device) -> torch.dtype:
    if dtype_name == "fp32":
        return torch.float32
    if dtype_name == "bf16":
        return bf16_dtype_for(device)
    if device.type != "cuda":
        raise StageUnavailable("fp16 runs on CUDA only (no fp16 on CPU: bf16 is the CPU's half type)")
    return torch.float16


def text_forward(dtype_name: str, eager: bool = False) -> Callable[[Context], Prepared]:
    """One forward of text300M at batch 2 (one guided step) in fp32, or under bf16 / fp16 autocast.

    `eager=True` swaps the fused `scaled_dot_product_attention` for the reference's plain
    attention: the "plain fp32 eager implementation" that the optimised paths are compared with.
    On CUDA the half-precision rows also report whether the flash attention kernel serves them.
    """

    def setup(ctx: Context) -> Prepared:
        dtype = _autocast_dtype(dtype_name, ctx.device)
        if eager:
            import shap_e.models.generation.transformer as transformer

            transformer.attention = eager_attention  # this stage runs in its own process
        config, model, inputs = _text_setup(ctx)
        info = {"dtype": str(dtype).replace("torch.", ""), "batch": 2,
                "flops": text_model_flops(config, batch=2)["total"]}
        reference = _forward(model, inputs, ctx.device, torch.float32) if dtype != torch.float32 else None

        def after(out: torch.Tensor) -> Dict[str, Any]:
            # The peak right after the timed runs, in this process: the fairest yardstick when
            # other jobs share the machine (the `matmul_peak` stage ran at another moment).
            metrics: Dict[str, Any] = {"local_peak_gflops": matmul_gflops(dtype, ctx.device, size=_peak_size(ctx))}
            if reference is not None:
                rel = (out - reference).norm() / reference.norm()
                cos = torch.nn.functional.cosine_similarity(out.flatten(), reference.flatten(), dim=0)
                metrics.update(rel_err_vs_fp32=float(rel), cosine_vs_fp32=float(cos),
                               finite=bool(torch.isfinite(out).all()))
                if ctx.device.type == "cuda" and not eager:
                    metrics["flash_attention"] = flash_attention_runs(
                        lambda: _forward(model, inputs, ctx.device, dtype))
            return metrics

        return Prepared(lambda: _forward(model, inputs, ctx.device, dtype), info, after)

    return setup


class _CountingModel(torch.nn.Module):
    """The diffusion model without CLIP (embeddings are passed directly), counting evaluations."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.d_latent = model.d_latent
        self.conditioning = model.conditioning
        self.calls = 0
        self.rows = set()

    def forward(self, x, t, **kwargs):
        self.calls += 1
        self.rows.add(x.shape[0])
        return self.model(x, t, **kwargs)


def sample(sampler: str, fast: bool) -> Callable[[Context], Prepared]:
    """`sample_latents` end to end, `ctx.samples` guided samples at once (2 rows each per evaluation),
    bf16 where supported."""

    def setup(ctx: Context) -> Prepared:
        try:
            from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
            from shap_e.diffusion.sample import sample_latents
        except ImportError as e:
            raise StageUnavailable(f"sample_latents missing ({e})") from e
        _, model, inputs = _text_setup(ctx)
        counted = _CountingModel(model)
        diffusion = diffusion_from_config(read_yaml("diffusion_config.yaml"))
        steps = ctx.fast_steps if fast else 64
        dtype = bf16_dtype_for(ctx.device)

        # Under CUDA graphs the model is compiled: no Python counter inside it.
        sampled = model if ctx.cuda_graph else counted

        def run() -> torch.Tensor:
            counted.calls, counted.rows = 0, set()
            return sample_latents(
                batch_size=ctx.samples, model=sampled, diffusion=diffusion,
                model_kwargs={"embeddings": inputs["embeddings"][:1].expand(ctx.samples, -1)},
                guidance_scale=GUIDANCE_SCALE, clip_denoised=True, use_fp16=False, use_karras=True,
                karras_steps=steps, sigma_min=1e-3, sigma_max=160.0, s_churn=0.0, device=ctx.device,
                sampler=sampler, generator=torch.Generator(device=ctx.device).manual_seed(ctx.seed),
                dtype=dtype, cuda_graph=ctx.cuda_graph,
            )

        def after(out: torch.Tensor) -> Dict[str, Any]:
            # rows per evaluation = 2 per sample when guidance runs as one batched call (cond + uncond)
            metrics = {"model_evals": counted.calls, "rows_per_eval": sorted(counted.rows),
                       "finite": bool(torch.isfinite(out).all())}
            if ctx.cuda_graph:
                metrics.update(model_evals=2 * steps - 1 if sampler == "heun" else steps, rows_per_eval=None)
            if ctx.device.type == "cuda":  # counted in one more run, after the timed ones
                metrics["cuda_syncs_per_sample"] = count_cuda_syncs(run)
            return metrics

        info = {"dtype": str(dtype).replace("torch.", ""), "sampler": sampler, "steps": steps,
                "guidance_scale": GUIDANCE_SCALE, "samples": ctx.samples, "cuda_graph": ctx.cuda_graph}
        return Prepared(run, info, after)

    return setup


def count_cuda_syncs(fn: Callable[[], Any]) -> int:
    """How many synchronising CUDA operations `fn` performs (`torch.cuda.set_sync_debug_mode`).

    Each host read of device data (`.item()`, `bool(tensor)`, a copy to the CPU, a data-dependent
    shape) is one; a sampler with none keeps the GPU's queue full between steps.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def _asset_file(directory: str) -> str:
    """A vertex-coloured icosphere (5120 faces) written as PLY: a stand-in asset, no download."""
    import trimesh

    mesh = trimesh.creation.icosphere(subdivisions=4)
    colors = ((mesh.vertices * 0.5 + 0.5) * 255).astype("uint8")
    mesh.visual.vertex_colors = [[*c, 255] for c in colors]
    path = str(Path(directory) / "asset.ply")
    mesh.export(path)
    return path


def _batch_maker(ctx: Context):
    """`() -> MultimodalBatch` of the stand-in asset, with the encoder's sizes (tiny: toy sizes)."""
    import tempfile

    try:
        from shap_e.encoding.batch import load_or_create_multimodal_batch
    except ImportError as e:
        raise StageUnavailable(f"asset loading missing ({e})") from e
    path = _asset_file(tempfile.mkdtemp(prefix="shap_e_bench_"))
    sizes = dict(point_count=256, random_sample_count=4096, mv_num_views=2, mv_image_size=16) if ctx.tiny else {}
    return lambda: load_or_create_multimodal_batch(ctx.device, model_path=path, mv_light_mode="basic",
                                                   seed=ctx.seed, **sizes)


def asset_to_batch(ctx: Context) -> Prepared:
    """Asset file -> encoder input: surface points + FPS (16384) and 20 rasterised views at 256²."""
    make = _batch_maker(ctx)
    return Prepared(make, {"asset": "icosphere, 5120 faces"},
                    after=lambda batch: {"points": int(batch.points.shape[-1]),
                                         "views": f"{batch.views.shape[1]}x{batch.views.shape[-1]}²"})


def encode(ctx: Context) -> Prepared:
    """Transmitter encoder on one asset (16384 points + 20 views at 256x256, made in setup)."""
    from shap_e.models.configs import model_from_config

    if ctx.tiny:
        raise StageUnavailable("no tiny transmitter config")
    config = read_yaml("transmitter_config.yaml")
    try:
        torch.manual_seed(ctx.seed)
        xm = model_from_config(config, device=ctx.device).eval()
    except ImportError as e:
        raise StageUnavailable(f"transmitter needs a missing module ({e})") from e
    batch = _batch_maker(ctx)()

    def run() -> torch.Tensor:
        with torch.inference_mode():
            return xm.encode_to_bottleneck(batch, generator=torch.Generator().manual_seed(ctx.seed))

    return Prepared(run, {"dtype": "float32", "points": 16384, "views": "20x256²"})


def _decoder(ctx: Context, grid_size: int):
    """The release ChannelsDecoder (random weights) and one random latent, via `bench.decode`."""
    if ctx.tiny:
        raise StageUnavailable("no tiny decoder config (the full decoder takes too long to build for a smoke test)")
    try:
        from bench.decode import build_decoder
        from shap_e.util import notebooks
    except ImportError as e:
        raise StageUnavailable(f"decoder needs a missing module ({e})") from e
    xm, latent = build_decoder(grid_size, ctx.seed, ctx.device)
    return xm, latent, notebooks


def decode_mesh(grid_size: int) -> Callable[[Context], Prepared]:
    """`decode_latent_mesh` (STF field on a grid + marching cubes) at `grid_size`."""

    def setup(ctx: Context) -> Prepared:
        xm, latent, notebooks = _decoder(ctx, grid_size)

        def after(mesh) -> Dict[str, Any]:
            return {"faces": int(mesh.faces.shape[0]), "verts": int(mesh.verts.shape[0])}

        return Prepared(lambda: notebooks.decode_latent_mesh(xm, latent), {"grid": grid_size}, after)

    return setup


def render_views(mode: str, size: int) -> Callable[[Context], Prepared]:
    """`decode_latent_images` of the 20 pan cameras at `size`x`size` in `mode` ("nerf" or "stf")."""

    def setup(ctx: Context) -> Prepared:
        from shap_e.rendering.cameras import create_pan_cameras

        xm, latent, notebooks = _decoder(ctx, 128)
        cameras = create_pan_cameras(size, device=ctx.device)

        def run():
            gen = torch.Generator(device=ctx.device).manual_seed(ctx.seed)
            return notebooks.decode_latent_images(xm, latent, cameras, rendering_mode=mode, generator=gen)

        return Prepared(run, {"views": f"20x{cameras.width}²", "mode": mode})

    return setup


def small_models(ctx: Context) -> Prepared:
    """`shap-e text "a red cube" --model text-small --format glb` in-process, model loading included
    (each run loads the bundled weights again: the time a user waits for one GLB)."""
    import itertools
    import tempfile

    from shap_e.cli import main
    from shap_e.models.registry import MODELS

    if "text-small" not in MODELS:
        raise StageUnavailable("the small bundled model text-small is not registered")
    folder = Path(tempfile.mkdtemp(prefix="shap_e_bench_small_"))
    counter = itertools.count()
    argv = ["text", "a red cube", "--model", "text-small", "--format", "glb", "--seed", str(ctx.seed),
            "--device", ctx.device.type]
    if ctx.tiny:  # checks the harness only: 2 sampler steps, a 16³ grid
        argv += ["--steps", "2", "--grid-size", "16"]

    def run() -> Dict[str, Any]:
        out = folder / f"run{next(counter)}"
        if main([*argv, "-o", str(out)]) != 0:
            raise RuntimeError(f"shap-e {' '.join(argv)} failed")
        glb = next(out.rglob("*.glb"))
        return {"glb_bytes": glb.stat().st_size}

    return Prepared(run, {"command": "shap-e " + " ".join(argv)}, after=lambda out: out)


def _peak_size(ctx: Context) -> int:
    """2048³ on a CPU; 8192³ on a GPU, where a 2048³ product (17 GFLOP) is over in tens of
    microseconds and would time the launch rather than the arithmetic."""
    if ctx.tiny:
        return 256
    return CUDA_MATMUL_SIZE if ctx.device.type == "cuda" else MATMUL_SIZE


def matmul_peak(ctx: Context) -> Prepared:
    """Best GFLOP/s of a large matmul in fp32 and bf16 (and fp16 on CUDA): the ceiling the
    transformer is judged against."""
    size = _peak_size(ctx)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    if ctx.device.type == "cuda":
        dtypes["fp16"] = torch.float16

    def run() -> Dict[str, float]:
        return {name: matmul_gflops(dtype, ctx.device, size=size) for name, dtype in dtypes.items()}

    return Prepared(run, {"size": size}, after=lambda peaks: {"peak_gflops": peaks})


STAGES: List[Stage] = [
    Stage("matmul_peak", "large matmul, fp32 and bf16 (+ fp16 on CUDA): machine peak", matmul_peak, True, 1, 0),
    Stage("text300M_fwd_fp32_eager", "text300M forward, batch 2, fp32, plain attention",
          text_forward("fp32", eager=True), True),
    Stage("text300M_fwd_fp32", "text300M forward, batch 2, fp32", text_forward("fp32"), True),
    Stage("text300M_fwd_bf16", "text300M forward, batch 2, bf16 autocast", text_forward("bf16"), True),
    Stage("text300M_fwd_fp16", "text300M forward, batch 2, fp16 autocast (CUDA only)", text_forward("fp16"), True),
    Stage("sample_heun64", "sample_latents, Heun 64 steps, guided", sample("heun", False), False, 1, 0),
    Stage("sample_fast", "sample_latents, DPM-Solver++(2M) fast preset", sample("dpmpp_2m", True), False, 3, 0),
    Stage("asset_to_batch", "asset -> encoder batch (points + 20 views 256²)", asset_to_batch, True),
    Stage("encode", "transmitter encode, 16k points + 20 views 256²", encode, count_flops=True),
    Stage("mesh_grid128", "decode_latent_mesh, grid 128", decode_mesh(128), count_flops=True),
    Stage("mesh_grid256", "decode_latent_mesh, grid 256", decode_mesh(256), count_flops=True),
    Stage("nerf_20x64", "NeRF render, 20 views 64²", render_views("nerf", 64), count_flops=True),
    Stage("stf_20x128", "STF render, 20 views 128²", render_views("stf", 128), count_flops=True),
    Stage("small_text_to_glb", "small bundled models, text -> GLB", small_models, True),
    Stage("official_text_to_glb", "text300M --preset fast -> GLB, random full-size checkpoints, per phase",
          official_text_to_glb("float32"), repeats=1, warmup=0),
    Stage("official_text_to_glb_int8", "the same with --precision int8", official_text_to_glb("int8"), repeats=1,
          warmup=0),
    Stage("train_step_transmitter", "one step of recipes/transmitter-small.yaml (16 assets)",
          TRAIN_STEP_SETUPS["transmitter"], repeats=20, warmup=3),
    Stage("train_step_text", "one step of recipes/text-small.yaml (batch 32)", TRAIN_STEP_SETUPS["text"], repeats=20, warmup=3),
    Stage("train_step_image", "one step of recipes/image-small.yaml (batch 32, latent probe)", TRAIN_STEP_SETUPS["image"],
          repeats=20, warmup=3),
]
STAGE_BY_NAME: Dict[str, Stage] = {stage.name: stage for stage in STAGES}
