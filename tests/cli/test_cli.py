"""The `shap-e` command end to end on tiny registered models (weights served from file:// URLs)."""
import hashlib
import json
import re

import pytest
import torch
import yaml
from safetensors.torch import save_file

from shap_e.cli import main
from shap_e.models import registry


def register_tiny(monkeypatch, tmp_path, name, config, state_dict, decoders=()):
    weights = tmp_path / f"{name}.safetensors"
    save_file({k: v.contiguous() for k, v in state_dict.items()}, str(weights))
    config_file = tmp_path / f"{name}.yaml"
    config_file.write_text(yaml.safe_dump(config))
    spec = registry.ModelSpec(
        name=name, config_file=str(config_file), url=weights.as_uri(),
        sha256=hashlib.sha256(weights.read_bytes()).hexdigest(), description=f"tiny test model {name}",
        decoders=decoders,
    )
    monkeypatch.setitem(registry.MODELS, name, spec)


@pytest.fixture
def tiny_models(monkeypatch, tmp_path, golden):
    from transformers import CLIPConfig, CLIPModel

    from shap_e.models.configs import model_from_config

    f = golden("f")
    # A prior whose latents fit the golden transmitter (64 tokens x 24 channels), random weights.
    text_config = {
        "name": "SplitVectorDiffusion", "d_latent": 64 * 24, "latent_ctx": 64,
        "inner": {"name": "CLIPImagePointDiffusionTransformer", "width": 32, "layers": 1, "heads": 2,
                  "time_token_cond": True, "token_cond": True, "use_pos_emb": True},
    }
    torch.manual_seed(0)
    prior = model_from_config(text_config)
    torch.nn.init.normal_(prior.wrapped.output_proj.weight, std=0.05)
    register_tiny(monkeypatch, tmp_path, "tiny-text", text_config, prior.state_dict(), decoders=("tiny-xm",))
    register_tiny(monkeypatch, tmp_path, "tiny-xm", f["config"]["transmitter"], f["state_dict"])
    common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    clip_config = CLIPConfig(
        text_config=dict(vocab_size=49408, max_position_embeddings=77, bos_token_id=49406,
                         eos_token_id=49407, pad_token_id=0, **common),
        vision_config=dict(image_size=32, patch_size=8, **common), projection_dim=768,
    )
    torch.manual_seed(0)
    CLIPModel(clip_config).save_pretrained(tmp_path / "clip")
    monkeypatch.setenv("SHAP_E_CLIP", str(tmp_path / "clip"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


@pytest.mark.slow
def test_text_command_writes_meshes_turntable_and_meta(tiny_models, capsys):
    out, cache = tiny_models / "out", tiny_models / "cache"
    argv = ["text", "a red cube", "--model", "tiny-text", "-o", str(out), "--steps", "8", "--batch", "2",
            "--format", "glb,ply,obj", "--gif", "--grid-size", "16", "--render-size", "16",
            "--device", "cpu", "--cache-dir", str(cache), "--seed", "7"]
    assert main(argv) == 0, capsys.readouterr().err
    folders = sorted(p.name for p in out.iterdir())
    assert folders == ["a_red_cube_seed7", "a_red_cube_seed8"]
    sample = out / "a_red_cube_seed7"
    assert {p.name for p in sample.iterdir()} == {
        "mesh.glb", "mesh.ply", "mesh.obj", "turntable.gif", "meta.json", "latent.pt"
    }
    meta = json.loads((sample / "meta.json").read_text())
    assert meta["prompt"] == "a red cube" and meta["seed"] == 7 and meta["model"] == "tiny-text"
    # The same seed alone reproduces sample 7 of the batch (one generator per sample); with few
    # steps float32 cancellation at sigma_max = 160 amplifies batch-size rounding, hence 8 steps.
    again = tiny_models / "again"
    argv_alone = argv + ["-o", str(again), "--batch", "1"]  # later options win
    assert main(argv_alone) == 0
    a = torch.load(sample / "latent.pt", weights_only=True)
    b = torch.load(again / "a_red_cube_seed7" / "latent.pt", weights_only=True)
    torch.testing.assert_close(a, b, atol=2e-4, rtol=0)


def test_decode_command_writes_a_mesh_from_a_latent(tiny_models, golden):
    latent = golden("f")["inputs"]["latent"][0]
    torch.save(latent, tiny_models / "latent.pt")
    out = tiny_models / "decoded"
    argv = ["decode", str(tiny_models / "latent.pt"), "-o", str(out), "--model", "tiny-xm", "--format", "ply",
            "--grid-size", "16", "--device", "cpu", "--cache-dir", str(tiny_models / "cache")]
    assert main(argv) == 0
    assert (out / "mesh.ply").read_bytes().startswith(b"ply\n")
    assert {p.name for p in out.iterdir()} == {"mesh.ply", "latent.pt", "meta.json"}  # a sample folder, as text writes
    assert torch.equal(torch.load(out / "latent.pt", weights_only=True), latent)
    meta = json.loads((out / "meta.json").read_text())
    assert (meta["latent"], meta["decoder"], meta["grid_size"]) == ("latent.pt", "tiny-xm", 16)
    sampled = tiny_models / "sampled"
    assert main(argv[:3] + [str(sampled)] + argv[4:] + ["--vertex-placement", "sampled"]) == 0
    import trimesh

    ref, true = (trimesh.load(d / "mesh.ply") for d in (out, sampled))
    # Same faces; the release placement shrinks the mesh by (G - 1) / (G + 1) = 15 / 17 about the centre.
    assert len(ref.faces) == len(true.faces)
    torch.testing.assert_close(torch.tensor(ref.vertices), torch.tensor(true.vertices) * 15 / 17, atol=1e-5, rtol=0)


def test_encode_command_refines_on_request(tiny_models, tmp_path, capsys):
    import trimesh

    asset = tmp_path / "box.ply"
    trimesh.creation.box(extents=(1.0, 0.5, 0.3)).export(asset)
    base = ["encode", str(asset), "--model", "tiny-xm", "--device", "cpu", "--cache-dir", str(tiny_models / "cache")]
    assert main(base + ["-o", str(tmp_path / "plain.pt")]) == 0
    assert main(base + ["-o", str(tmp_path / "refined.pt"), "--refine-steps", "3"]) == 0
    plain, refined = (torch.load(tmp_path / f"{n}.pt", weights_only=True) for n in ("plain", "refined"))
    assert plain.shape == refined.shape and not torch.equal(plain, refined)
    assert main(base + ["-o", str(tmp_path / "x.pt"), "--refine-steps", "-2"]) == 2
    assert "--refine-steps must be an integer in [0, 100000], got -2" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["text", "  "], "the prompt is empty"),
        (["text", "a cube", "--model", "nope"], "--model 'nope' is not in the registry"),
        (["text", "a cube", "--format", "fbx"], "--format 'fbx'"),
        (["image", "no_such_picture.png"], "does not exist"),
        (["decode", "missing.pt", "-o", "x"], "latent file 'missing.pt' does not exist"),
        (["download", "nope"], "unknown model(s) nope"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_a_picture_with_transparency_is_read_on_white(tmp_path):
    import numpy as np
    from PIL import Image

    from shap_e.cli.generate import read_image

    pixels = np.zeros((4, 4, 4), np.uint8)
    pixels[1:3, 1:3] = (200, 30, 30, 255)
    pixels[0, 0] = (0, 0, 255, 128)  # half transparent blue over white
    Image.fromarray(pixels).save(tmp_path / "rgba.png")
    rgb = np.asarray(read_image(str(tmp_path / "rgba.png")))
    assert rgb.shape == (4, 4, 3)
    assert tuple(rgb[3, 3]) == (255, 255, 255) and tuple(rgb[1, 1]) == (200, 30, 30)
    assert tuple(rgb[0, 0]) == (127, 127, 255)


@pytest.mark.slow
def test_text_starts_from_an_init_latent_at_the_given_strength(tiny_models, golden, capsys):
    latent = golden("f")["inputs"]["latent"][0]
    torch.save(latent, tiny_models / "start.pt")
    torch.save(-latent, tiny_models / "opposite.pt")
    common = ["text", "a red cube", "--model", "tiny-text", "--steps", "8", "--format", "ply", "--grid-size", "16",
              "--device", "cpu", "--cache-dir", str(tiny_models / "cache")]
    assert main(common + ["--init-latent", str(tiny_models / "start.pt"), "-o", str(tiny_models / "x")]) == 2
    assert "--init-latent needs --init-strength in (0, 1]" in capsys.readouterr().err
    for start in ("start", "opposite"):
        argv = common + ["--init-latent", str(tiny_models / f"{start}.pt"), "--init-strength", "0.25"]
        assert main(argv + ["-o", str(tiny_models / start)]) == 0
        assert "| 2/2 [" in capsys.readouterr().err  # the last quarter of the 8 steps
    meta = json.loads((tiny_models / "start" / "a_red_cube_seed0" / "meta.json").read_text())
    assert (meta["init_latent"], meta["init_strength"]) == ("start.pt", 0.25)
    samples = [torch.load(tiny_models / s / "a_red_cube_seed0" / "latent.pt", weights_only=True)
               for s in ("start", "opposite")]
    assert not torch.equal(*samples)
    torch.save(torch.zeros(7), tiny_models / "wrong.pt")
    assert main(common + ["--init-latent", str(tiny_models / "wrong.pt"), "--init-strength", "0.5",
                          "-o", str(tiny_models / "y")]) == 2
    assert "init_latent must be" in capsys.readouterr().err


def test_an_image_that_is_not_an_image_is_rejected(tmp_path, capsys):
    bad = tmp_path / "photo.png"
    bad.write_text("not a picture")
    assert main(["image", str(bad)]) == 2
    assert "is not an image" in capsys.readouterr().err


def test_unwritable_output_directory_is_reported(tiny_models, golden, capsys):
    torch.save(golden("f")["inputs"]["latent"][0], tiny_models / "latent.pt")
    blocker = tiny_models / "file"
    blocker.write_text("x")
    argv = ["decode", str(tiny_models / "latent.pt"), "-o", str(blocker / "sub"), "--model", "tiny-xm",
            "--grid-size", "16", "--device", "cpu", "--cache-dir", str(tiny_models / "cache")]
    assert main(argv) == 2
    assert "cannot write" in capsys.readouterr().err


def test_models_command_lists_the_registry(capsys, tmp_path):
    assert main(["models", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for name in ("transmitter", "decoder", "text300M", "image300M"):
        assert name in out


def test_fast_preset_samples_with_dpmpp_2m_and_records_it_in_meta(tiny_models, capsys):
    from shap_e.diffusion.presets import FAST_STEPS

    cache = tiny_models / "cache"
    common = ["text", "a red cube", "--model", "tiny-text", "--format", "ply", "--grid-size", "16",
              "--device", "cpu", "--cache-dir", str(cache), "--preset", "fast"]
    for out, extra, steps in (("fast", [], FAST_STEPS), ("fast4", ["--steps", "4"], 4)):
        assert main(common + ["-o", str(tiny_models / out)] + extra) == 0, capsys.readouterr().err
        meta = json.loads((tiny_models / out / "a_red_cube_seed0" / "meta.json").read_text())
        assert (meta["preset"], meta["sampler"], meta["steps"]) == ("fast", "dpmpp_2m", steps)


def test_unknown_preset_is_rejected_with_the_valid_names(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["text", "a cube", "--preset", "turbo"])
    assert exit_info.value.code == 2
    assert "'default', 'fast'" in capsys.readouterr().err


def test_guidance_defaults_to_the_models_recommended_value(tiny_models, capsys, monkeypatch):
    import dataclasses

    monkeypatch.setitem(registry.MODELS, "tiny-text",
                        dataclasses.replace(registry.MODELS["tiny-text"], guidance_scale=2.5))
    common = ["text", "a red cube", "--model", "tiny-text", "--format", "ply", "--grid-size", "16", "--steps", "2",
              "--device", "cpu", "--cache-dir", str(tiny_models / "cache")]
    for out, extra, guidance in (("recommended", [], 2.5), ("given", ["--guidance", "4"], 4.0)):
        assert main(common + ["-o", str(tiny_models / out)] + extra) == 0, capsys.readouterr().err
        meta = json.loads((tiny_models / out / "a_red_cube_seed0" / "meta.json").read_text())
        assert meta["guidance"] == guidance


def test_guidance_max_sigma_defaults_to_the_models_recommended_value_and_all_guides_every_step(
    tiny_models, capsys, monkeypatch
):
    import dataclasses

    monkeypatch.setitem(registry.MODELS, "tiny-text",
                        dataclasses.replace(registry.MODELS["tiny-text"], guidance_max_sigma=5.0))
    common = ["text", "a red cube", "--model", "tiny-text", "--format", "ply", "--grid-size", "16", "--steps", "2",
              "--device", "cpu", "--cache-dir", str(tiny_models / "cache")]
    runs = (("recommended", [], 5.0), ("given", ["--guidance-max-sigma", "5"], 5.0),
            ("every", ["--guidance-max-sigma", "all"], None))
    latents = {}
    for out, extra, max_sigma in runs:
        assert main(common + ["-o", str(tiny_models / out)] + extra) == 0, capsys.readouterr().err
        sample = tiny_models / out / "a_red_cube_seed0"
        assert json.loads((sample / "meta.json").read_text())["guidance_max_sigma"] == max_sigma
        latents[out] = torch.load(sample / "latent.pt")
    assert torch.equal(latents["recommended"], latents["given"])
    assert not torch.allclose(latents["recommended"], latents["every"])  # the first step (sigma 160) is guided


@pytest.mark.parametrize("bad", ["0", "-1", "inf", "nan", "high"])
def test_guidance_max_sigma_must_be_positive_or_all(bad, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["text", "a cube", "--guidance-max-sigma", bad])
    assert exit_info.value.code == 2
    assert "neither a positive number nor 'all'" in capsys.readouterr().err


@pytest.mark.slow
def test_prompts_under_torchrun_are_shared_between_ranks_and_drawn_as_by_one_process(tmp_path, torchrun, monkeypatch):
    monkeypatch.setenv("SHAP_E_CACHE", str(tmp_path / "cache"))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a red cube\na blue ball\na green torus\n")
    common = ["text", "--prompts", str(prompts), "--model", "text-small", "--preset", "fast", "--grid-size", "16",
              "--format", "ply"]
    logs = torchrun("-m", "shap_e", *common, "-o", str(tmp_path / "two"))
    assert [sorted(re.findall(r"wrote \S*/(\w+)", log)) for log in logs] == [
        ["a_green_torus_seed0", "a_red_cube_seed0"], ["a_blue_ball_seed0"]
    ]  # rank r draws prompts r, r + 2, ...
    assert main(common + ["-o", str(tmp_path / "one")]) == 0
    for name in ("a_red_cube_seed0", "a_blue_ball_seed0", "a_green_torus_seed0"):
        two, one = (torch.load(tmp_path / run / name / "latent.pt") for run in ("two", "one"))
        assert torch.equal(two, one), name


def test_text_small_names_the_prompt_words_it_never_saw_in_training(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SHAP_E_CACHE", str(tmp_path / "cache"))
    common = ["text", "--model", "text-small", "--preset", "fast", "--grid-size", "16", "--format", "ply"]
    assert main(common + ["a jade dragon", "-o", str(tmp_path / "odd")]) == 0
    err = capsys.readouterr().err
    assert "note: text-small never saw dragon, jade in training (prompt 'a jade dragon')" in err
    assert list((tmp_path / "odd").glob("*/mesh.ply"))  # a note, not an error: the sample is still written
    assert main(common + ["a crimson box", "-o", str(tmp_path / "known")]) == 0
    assert "never saw" not in capsys.readouterr().err


def test_text_warns_in_one_line_when_the_end_of_a_long_prompt_does_not_reach_the_prior(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SHAP_E_CACHE", str(tmp_path / "cache"))
    prompt = "a " + "very " * 21 + "tall box that is red"  # [CLS] + 22 words fill 23 of the 24 columns
    args = ["text", prompt, "--model", "text-small", "--preset", "fast", "--grid-size", "16", "--format", "ply",
            "-o", str(tmp_path / "long")]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "warning: this MiniLM prior reads the first 24 tokens of a prompt" in err
    assert "does not reach the prior: 'box that is red'." in err
    assert "PromptTruncatedWarning" not in err and "_warn_past_grid" not in err  # no Python warning lines
    assert list((tmp_path / "long").glob("*/mesh.ply"))


def test_image_sampling_starts_from_the_latent_head_at_the_recommended_strength(tiny_models, capsys, monkeypatch):
    import dataclasses

    from PIL import Image

    from shap_e.models.configs import model_from_config

    config = {
        "name": "SplitVectorDiffusion", "d_latent": 64 * 24, "latent_ctx": 64, "conditioner": "grid_encoder",
        "latent_head": True, "image_encoder": {"image_size": 16, "patch_size": 4, "width": 16, "layers": 1, "heads": 2},
        "inner": {"name": "CLIPImageGridPointDiffusionTransformer", "width": 16, "layers": 1, "heads": 2,
                  "grid_channels": 16, "grid_tokens": 16, "time_token_cond": True, "use_pos_emb": True},
    }
    torch.manual_seed(0)
    for name, cfg in (("tiny-image", config), ("tiny-image-nohead", dict(config, latent_head=False))):
        register_tiny(monkeypatch, tiny_models, name, cfg, model_from_config(cfg).state_dict(), decoders=("tiny-xm",))
    monkeypatch.setitem(registry.MODELS, "tiny-image",
                        dataclasses.replace(registry.MODELS["tiny-image"], init_strength=0.5))
    picture = tiny_models / "pic.png"
    Image.new("RGB", (24, 24), (200, 30, 30)).save(picture)
    common = ["image", str(picture), "--format", "ply", "--grid-size", "16", "--steps", "4", "--device", "cpu",
              "--cache-dir", str(tiny_models / "cache")]
    for out, extra, strength in (("recommended", [], 0.5), ("noise", ["--init-strength", "1"], 1.0)):
        assert main(common + ["--model", "tiny-image", "-o", str(tiny_models / out)] + extra) == 0, capsys.readouterr().err
        assert json.loads((tiny_models / out / "pic_png_seed0" / "meta.json").read_text())["init_strength"] == strength
    assert main(common + ["--model", "tiny-image-nohead", "--init-strength", "0.5", "-o", str(tiny_models / "x")]) == 2
    assert "needs a prior with a latent head; 'tiny-image-nohead' has none" in capsys.readouterr().err
    assert main(common + ["--model", "tiny-image", "--init-strength", "0", "-o", str(tiny_models / "y")]) == 2
    assert "--init-strength must be in (0, 1]" in capsys.readouterr().err


def test_int8_precision_samples_close_to_float32_and_records_it_in_meta(tiny_models, capsys):
    base = ["text", "a red cube", "--model", "tiny-text", "--steps", "8", "--format", "ply", "--grid-size", "16",
            "--device", "cpu", "--cache-dir", str(tiny_models / "cache")]
    assert main(base + ["-o", str(tiny_models / "fp32")]) == 0
    assert main(base + ["-o", str(tiny_models / "int8"), "--precision", "int8"]) == 0
    assert "loaded tiny-text (int8)" in capsys.readouterr().err
    meta = json.loads((tiny_models / "int8" / "a_red_cube_seed0" / "meta.json").read_text())
    assert meta["precision"] == "int8"
    a, b = (torch.load(tiny_models / d / "a_red_cube_seed0" / "latent.pt", weights_only=True) for d in ("int8", "fp32"))
    assert 0 < float((a - b).norm() / b.norm()) < 0.2


def test_int8_precision_refuses_a_half_dtype(capsys):
    assert main(["text", "a cube", "--precision", "int8", "--dtype", "bfloat16", "--device", "cpu"]) == 2
    assert "--precision int8 computes around its int8 products in float32; drop --dtype bfloat16" in capsys.readouterr().err


def test_text_frees_clip_before_sampling_and_decodes_with_the_transmitters_decoder_part(tiny_models, monkeypatch):
    import shap_e.diffusion.sample as sample_module
    import shap_e.models.decode as decode_module
    from shap_e.models import clip as clip_module
    from shap_e.models.transmitter.base import ChannelsDecoder

    seen = {}
    sample_latents, load_decoder = sample_module.sample_latents, decode_module.load_decoder

    def sample_spy(*args, **kwargs):
        seen["clip_towers"] = [c._text for c in clip_module._DEFAULT_CLIPS.values()]
        return sample_latents(*args, **kwargs)

    def decoder_spy(*args, **kwargs):
        seen["decoder"] = load_decoder(*args, **kwargs)
        return seen["decoder"]

    monkeypatch.setattr(sample_module, "sample_latents", sample_spy)
    monkeypatch.setattr(decode_module, "load_decoder", decoder_spy)
    monkeypatch.setattr(clip_module, "_DEFAULT_CLIPS", {})
    argv = ["text", "a red cube", "--model", "tiny-text", "--steps", "4", "--format", "ply", "--grid-size", "16",
            "--device", "cpu", "--cache-dir", str(tiny_models / "cache"), "-o", str(tiny_models / "out")]
    assert main(argv) == 0
    assert seen["clip_towers"] == [None]  # CLIP embedded the prompt, then was freed before sampling
    assert isinstance(seen["decoder"], ChannelsDecoder)  # tiny-xm is a Transmitter: only its decoder part loads
    meta = json.loads((tiny_models / "out" / "a_red_cube_seed0" / "meta.json").read_text())
    assert meta["decoder"] == "tiny-xm"


def test_a_decoder_that_cannot_be_fetched_fails_before_sampling(tiny_models, monkeypatch, capsys):
    import dataclasses

    import shap_e.diffusion.sample as sample_module

    spec = registry.MODELS["tiny-xm"]
    monkeypatch.setitem(registry.MODELS, "tiny-xm", dataclasses.replace(spec, url=(tiny_models / "gone.pt").as_uri()))
    monkeypatch.setattr(sample_module, "sample_latents", lambda **kwargs: pytest.fail("sampled before the decoder"))
    argv = ["text", "a red cube", "--model", "tiny-text", "--device", "cpu", "--cache-dir", str(tiny_models / "empty"),
            "-o", str(tiny_models / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the decoder 'tiny-xm' is needed and not cached: cannot download" in err and "Traceback" not in err
