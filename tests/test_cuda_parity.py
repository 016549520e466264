"""The same code on a CUDA GPU gives the CPU's results (issue #8, GPU readiness).

Skipped without a CUDA device (CI has none); run on a GPU machine with
`python -m pytest -q tests/test_cuda_parity.py tests/rendering/test_marching_cubes.py`.
float32 comparisons run with TF32 off (torch's default for matmuls), so CPU and GPU differ only
by summation order.
"""
import numpy as np
import pytest
import torch

from bench.stages import TINY_TEXT as BENCH_TINY_TEXT
from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.diffusion.sample import sample_latents
from shap_e.models.configs import model_from_config
from shap_e.models.download import load_config, load_model
from shap_e.rendering.cameras import create_pan_cameras
from shap_e.util.notebooks import decode_latent_images, decode_latent_mesh

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# The benchmark's toy text prior, twice as wide and with larger initial weights (outputs well above rounding).
TINY_TEXT = {**BENCH_TINY_TEXT, "inner": {**BENCH_TINY_TEXT["inner"], "width": 64, "init_scale": 1.0}}


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float().cpu() - b.float().cpu()).norm() / b.float().cpu().norm())


@pytest.fixture(scope="module")
def tiny_prior():
    """`(cpu_model, cuda_model)`: one randomly initialised tiny text prior on both devices, every
    weight nonzero (a fresh model's zero-initialised output layer would make the checks vacuous)."""
    torch.manual_seed(0)
    cpu = model_from_config(TINY_TEXT, device="cpu").eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in cpu.parameters():
            if not param.any():
                param.copy_(torch.randn(param.shape, generator=gen) * 0.05)
    cuda = model_from_config(TINY_TEXT, device="cuda").eval()
    cuda.load_state_dict(cpu.state_dict())
    return cpu, cuda


def guided_step_inputs(device):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, TINY_TEXT["d_latent"], generator=gen)
    emb = torch.randn(2, 768, generator=gen)
    emb[1] = 0
    return x.to(device), torch.tensor([500, 20], device=device), emb.to(device)


def test_prior_forward_on_cuda_matches_cpu_in_float32(tiny_prior):
    cpu, cuda = tiny_prior
    with torch.inference_mode():
        x, t, emb = guided_step_inputs("cpu")
        expected = cpu(x, t, embeddings=emb)
        x, t, emb = guided_step_inputs("cuda")
        got = cuda(x, t, embeddings=emb)
    assert got.is_cuda
    assert expected.abs().max() > 0.1
    assert relative_error(got, expected) < 1e-5


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_prior_forward_on_cuda_uses_flash_attention_and_stays_close(tiny_prior, dtype):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    _, cuda = tiny_prior
    x, t, emb = guided_step_inputs("cuda")
    with torch.inference_mode():
        expected = cuda(x, t, embeddings=emb)
        with torch.autocast("cuda", dtype=dtype), sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            got = cuda(x, t, embeddings=emb)
    assert torch.isfinite(got).all()
    assert relative_error(got, expected) < 2e-2


def test_sample_latents_on_cuda_matches_cpu_given_the_same_cpu_generator(tiny_prior):
    diffusion = diffusion_from_config(load_config("diffusion"))
    emb = guided_step_inputs("cpu")[2][:1]
    latents = {}
    for device, model in zip(("cpu", "cuda"), tiny_prior):
        latents[device] = sample_latents(
            batch_size=1, model=model, diffusion=diffusion, model_kwargs={"embeddings": emb.to(device)},
            guidance_scale=3.0, clip_denoised=True, use_fp16=False, use_karras=True, karras_steps=16,
            sigma_min=1e-3, sigma_max=160.0, s_churn=0.0, device=torch.device(device),
            generator=torch.Generator().manual_seed(0),
        )
    assert latents["cuda"].is_cuda
    assert relative_error(latents["cuda"], latents["cpu"]) < 1e-4


@pytest.mark.parametrize("sampler", ["heun", "dpmpp_2m"])
def test_cuda_graph_sampling_matches_the_eager_sample(tiny_prior, sampler):
    """`cuda_graph=True` replays the model call from CUDA graphs: same latents as eager within the
    sampler tolerance of the CPU-vs-CUDA check above, for a sampler that keeps its previous output."""
    _, cuda = tiny_prior
    diffusion = diffusion_from_config(load_config("diffusion"))
    emb = guided_step_inputs("cuda")[2][:1]
    latents = [sample_latents(batch_size=1, model=cuda, diffusion=diffusion, model_kwargs={"embeddings": emb},
                              guidance_scale=3.0, device=torch.device("cuda"), karras_steps=16, sampler=sampler,
                              generator=torch.Generator().manual_seed(0), cuda_graph=graph) for graph in (False, True)]
    assert relative_error(latents[1], latents[0]) < 1e-4


def test_sampling_loop_on_cuda_never_waits_for_the_gpu(tiny_prior):
    """From the second model call to the end of `sample_latents`, no operation synchronises the
    host with the GPU (torch's sync debug mode raises on the first one)."""
    _, cuda = tiny_prior
    diffusion = diffusion_from_config(load_config("diffusion"))
    emb = guided_step_inputs("cuda")[2][:1]

    class ArmsAtSecondCall(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner, self.d_latent, self.calls = cuda, cuda.d_latent, 0
            self.conditioning = cuda.conditioning

        def forward(self, *args, **kwargs):
            self.calls += 1
            if self.calls == 2:
                torch.cuda.set_sync_debug_mode("error")
            return self.inner(*args, **kwargs)

    model = ArmsAtSecondCall()
    for sampler in ("heun", "dpmpp_2m", "euler_ancestral"):
        model.calls = 0
        try:
            sample_latents(
                batch_size=1, model=model, diffusion=diffusion, model_kwargs={"embeddings": emb},
                guidance_scale=3.0, device=torch.device("cuda"), karras_steps=8, sampler=sampler,
                generator=torch.Generator("cuda").manual_seed(0),
            )
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert model.calls > 2, sampler


@pytest.fixture(scope="module")
def small_latent(tmp_path_factory):
    """`(xm_cpu, xm_cuda, latent)`: the bundled transmitter on both devices and its CPU encoding
    of a procedural two-colour table."""
    from shap_e.data import generate_asset
    from shap_e.encoding import encode

    path = tmp_path_factory.mktemp("asset") / "table.ply"
    generate_asset("table", "red", "regular", seed=4, secondary_colour="white").mesh.export(path)
    xm_cpu = load_model("transmitter-small", device="cpu", progress=False)
    xm_cuda = load_model("transmitter-small", device="cuda", progress=False)
    latent = encode(str(path), xm_cpu, generator=torch.Generator().manual_seed(0), seed=0)
    return xm_cpu, xm_cuda, latent, path


def test_encoder_batch_on_cuda_has_the_cpu_point_cloud_and_views(small_latent):
    from shap_e.encoding.batch import load_or_create_multimodal_batch

    path = str(small_latent[3])
    sizes = dict(model_path=path, mv_light_mode="basic", seed=0, point_count=1024, random_sample_count=4096,
                 mv_num_views=3, mv_image_size=64)
    cpu = load_or_create_multimodal_batch(torch.device("cpu"), **sizes)
    gpu = load_or_create_multimodal_batch(torch.device("cuda"), **sizes)
    assert gpu.points.is_cuda and gpu.views.is_cuda
    assert torch.equal(gpu.points.cpu(), cpu.points)
    assert cpu.view_alphas.mean() > 0.05  # the object is in view
    for name in ("views", "depths", "view_alphas"):
        diff = (getattr(gpu, name).cpu() - getattr(cpu, name)).abs()
        assert (diff > 1e-3).float().mean() < 0.01, name  # a pixel may flip at a silhouette edge


def test_encoding_on_cuda_matches_cpu(small_latent):
    from shap_e.encoding import encode

    _, xm_cuda, latent, path = small_latent
    on_cuda = encode(str(path), xm_cuda, generator=torch.Generator().manual_seed(0), seed=0)  # device: xm_cuda's
    assert on_cuda.is_cuda
    assert relative_error(on_cuda, latent) < 1e-3


def test_decoded_mesh_on_cuda_matches_cpu(small_latent):
    xm_cpu, xm_cuda, latent, _ = small_latent
    cpu = decode_latent_mesh(xm_cpu, latent, grid_size=64, query_dtype=None)
    gpu = decode_latent_mesh(xm_cuda, latent.cuda(), grid_size=64, query_dtype=None)
    assert cpu.faces.shape[0] > 1000
    assert abs(gpu.faces.shape[0] - cpu.faces.shape[0]) <= 0.01 * cpu.faces.shape[0]
    # every GPU vertex lies on the CPU surface: nearest CPU vertex within a tenth of a grid cell
    cell = 2.0 / 63
    nearest = torch.cdist(gpu.verts.cpu().float(), cpu.verts.float()).min(dim=1).values
    assert torch.quantile(nearest, 0.99) < 0.1 * cell
    assert gpu.vertex_channels.keys() == cpu.vertex_channels.keys()


def test_stf_views_on_cuda_match_cpu(small_latent):
    xm_cpu, xm_cuda, latent, _ = small_latent
    cpu = decode_latent_images(xm_cpu, latent, create_pan_cameras(32, device="cpu"), "stf")
    gpu = decode_latent_images(xm_cuda, latent.cuda(), create_pan_cameras(32, device="cuda"), "stf")
    diff = np.abs(np.stack([np.asarray(i, np.int16) for i in gpu]) - np.stack([np.asarray(i, np.int16) for i in cpu]))
    assert np.asarray(cpu[0]).std() > 5  # not a blank view
    assert (diff > 4).mean() < 0.01  # a pixel may flip at a silhouette edge


def test_nerf_views_on_cuda_match_cpu_given_the_same_cpu_generator():
    """The release decoder with random weights and a random latent (its field is noise, so every
    pixel sees density). A CPU generator draws the same ray samples whichever device renders."""
    from bench.decode import build_decoder

    images = {}
    for device in ("cpu", "cuda"):
        xm, latent = build_decoder(32, 0, torch.device(device))
        views = decode_latent_images(xm, latent, create_pan_cameras(24, device=device), "nerf",
                                     generator=torch.Generator().manual_seed(0), query_dtype=None)
        images[device] = np.stack([np.asarray(i, np.float32) for i in views])
    assert images["cpu"].mean() > 5
    diff = np.abs(images["cuda"] - images["cpu"])
    assert diff.mean() < 0.5 and np.quantile(diff, 0.99) <= 4
