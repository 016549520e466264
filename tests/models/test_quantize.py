"""int8 CPU inference of the priors' transformers (`shap_e.models.quantize`), on the golden small models."""
import copy
import gc

import pytest
import torch
import torch.nn as nn

from shap_e.models.configs import model_from_config
from shap_e.models.quantize import Int8Linear, apply_precision, check_precision, int8_available, quantize_int8

pytestmark = pytest.mark.skipif(not int8_available(), reason="this torch build has no CPU quantisation engine")

# Measured on the golden models (bench/README.md, "int8"): forward 0.016 relative error, Heun-64
# latent 0.056 from float32's; the bounds leave room for other CPUs' kernels.
FORWARD_REL_ERR = 0.03
HEUN64_REL_RMS = 0.12


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def test_int8_linear_is_close_to_the_float_product_per_row():
    torch.manual_seed(0)
    linear = nn.Linear(64, 96)
    x = torch.randn(3, 5, 64) * torch.logspace(-2, 2, 5)[None, :, None]  # rows four decades apart
    out = Int8Linear(linear)(x)
    assert out.shape == (3, 5, 96) and out.dtype == torch.float32
    with torch.no_grad():
        reference = linear(x)
    for row in range(5):  # a per-row scale keeps small rows as accurate as large ones
        assert 1e-4 < relative_error(out[:, row], reference[:, row]) < 0.02


def test_int8_linear_without_bias_and_in_bfloat16():
    linear = nn.Linear(32, 16, bias=False)
    x = torch.randn(4, 32)
    out = Int8Linear(linear)(x.bfloat16())
    assert out.dtype == torch.bfloat16
    assert relative_error(out.float(), linear(x).detach()) < 0.03


def test_quantize_swaps_only_the_transformer_stack_linears(golden_text_prior):
    model, _ = golden_text_prior
    quantized = quantize_int8(copy.deepcopy(model))
    swapped = [name for name, m in quantized.named_modules() if isinstance(m, Int8Linear)]
    layers = len(model.wrapped.backbone.resblocks)
    assert len(swapped) == 4 * layers and all(name.startswith("wrapped.backbone.") for name in swapped)
    for name in ("input_proj", "output_proj", "clip_embed"):
        assert type(getattr(quantized.wrapped, name)) is nn.Linear


def test_int8_forward_stays_within_the_stated_error_of_float32(golden_text_prior):
    model, a = golden_text_prior
    quantized = quantize_int8(copy.deepcopy(model))
    x = a["inputs"]["x"]
    for case in a["inputs"]["cases"]:
        kwargs = {} if case["embeddings"] is None else {"embeddings": case["embeddings"]}
        with torch.no_grad():
            reference, out = model(x, case["t"], **kwargs), quantized(x, case["t"], **kwargs)
        error = relative_error(out, reference)
        assert 1e-4 < error < FORWARD_REL_ERR, case["name"]


def test_int8_heun64_latent_stays_within_the_stated_distance(golden):
    from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
    from shap_e.diffusion.sample import sample_latents

    d = golden("d")
    model = model_from_config(d["config"]["text_model"])
    model.load_state_dict(d["state_dict"]["text_model"])
    model.eval()
    diffusion = diffusion_from_config(d["config"]["diffusion"])
    kwargs = {"embeddings": d["inputs"]["text_embeddings"]}

    def sample(m):
        return sample_latents(batch_size=2, model=m, diffusion=diffusion, model_kwargs=kwargs, guidance_scale=3.0,
                              generator=torch.Generator().manual_seed(0))

    reference, out = sample(model), sample(quantize_int8(copy.deepcopy(model)))
    assert 1e-4 < relative_error(out, reference) < HEUN64_REL_RMS


def test_precision_names_and_devices_are_checked():
    assert check_precision(None, "cpu") == "float32"
    with pytest.raises(ValueError, match="precision='int4' is unknown; use one of float32, int8"):
        check_precision("int4", "cpu")
    with pytest.raises(ValueError, match="runs on the CPU only"):
        check_precision("int8", "cuda")


def test_apply_precision_float32_leaves_the_model_alone_and_int8_needs_a_transformer(golden_text_prior):
    model, _ = golden_text_prior
    assert apply_precision(model, "float32") is model
    assert not any(isinstance(m, Int8Linear) for m in model.modules())
    with pytest.raises(ValueError, match="Sequential has no transformer stack"):
        apply_precision(nn.Sequential(nn.Linear(4, 4)), "int8")


def test_load_model_int8_quantises_the_loaded_prior(golden_text_prior, tmp_path):
    from safetensors.torch import save_file

    from shap_e.models.download import load_model

    model, a = golden_text_prior
    path = tmp_path / "prior.safetensors"
    save_file(model.state_dict(), str(path))
    loaded = load_model("text300M", weights_path=path, config=a["config"]["variant_A"], precision="int8")
    assert sum(isinstance(m, Int8Linear) for m in loaded.modules()) == 4 * len(model.wrapped.backbone.resblocks)


def test_int8_load_keeps_the_int8_weights_not_the_float32_pages(tmp_path, peak_rss):
    from shap_e.models.download import load_model

    config = {"name": "SplitVectorDiffusion", "d_latent": 64 * 64, "latent_ctx": 64,
              "inner": {"name": "CLIPImagePointDiffusionTransformer", "width": 512, "layers": 8, "heads": 8}}
    torch.manual_seed(0)
    state = model_from_config(config).state_dict()
    fp32_mb = sum(v.numel() * v.element_size() for v in state.values()) / 2**20  # 106 MB, 95 % in the stack
    torch.save(state, tmp_path / "prior.pt")
    del state
    peak_rss.start()
    model = load_model("text300M", weights_path=tmp_path / "prior.pt", config=config, precision="int8")
    with torch.no_grad():
        model(torch.randn(1, 64 * 64), torch.tensor([10]))
    gc.collect()
    held = peak_rss.held_mb()
    # Measured 56 MB: the packed int8 stack, the float32 rest and the allocator's activations. If the
    # remaining tensors still pointed into the memory-mapped file, the float32 pages read while
    # quantising would stay resident too: 154 MB.
    assert held < 0.75 * fp32_mb, (held, fp32_mb)
