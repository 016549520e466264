"""The mistakes and accidents of real users, through the `shap-e` command on the bundled models:
each is one line on stderr and exit status 2 (never a traceback), or works; nothing is overwritten,
lost or written non-finite."""
import json
import os
import stat

import numpy as np
import pytest
import torch

from tests.cli.conftest import run

FAST = ["--steps", "2", "--grid-size", "16", "--format", "ply", "--device", "cpu"]


pytestmark = pytest.mark.usefixtures("offline_cache")


def one_error_line(err: str) -> str:
    """The error line, after checking that it is the only one and that no traceback was printed."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1 and err.rstrip().endswith(errors[0]), err
    return errors[0]


def strict_json(path):
    def refuse(constant):
        raise ValueError(f"{path} holds {constant}, which is not JSON")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


@pytest.mark.parametrize("guidance", ["nan", "inf", "1e30"])
def test_non_finite_or_huge_guidance_is_refused_before_anything_is_written(guidance, capsys, tmp_path):
    code, err = run(["text", "a red cube", "--guidance", guidance, "-o", "g", *FAST], capsys)
    assert code == 2 and "--guidance must be a finite number in [-1000, 1000]" in one_error_line(err)
    assert not (tmp_path / "g").exists() or not any((tmp_path / "g").iterdir())


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_decoding_a_non_finite_latent_is_refused(bad, capsys, tmp_path):
    torch.save(torch.full((4096,), bad), tmp_path / "bad.pt")
    code, err = run(["decode", "bad.pt", "-o", "mesh"], capsys)
    assert code == 2 and "bad.pt holds 4096 NaN or infinite values of 4096" in one_error_line(err)
    assert not (tmp_path / "mesh").exists()


def test_bulk_prompts_get_one_readable_folder_each_and_are_never_overwritten(capsys, tmp_path):
    prompts = ["a red cube", "un cubo rojo", "一个红色的立方体", "🟥🧊", "a red cube", "A Red Cube!"]
    (tmp_path / "p.txt").write_text("\n".join(prompts) + "\n", encoding="utf-8")
    code, err = run(["text", "--prompts", "p.txt", "-o", "out", *FAST], capsys)
    assert code == 0, err
    assert "note: prompt 5 repeats prompt 1 ('a red cube'); its samples are made once" in err
    folders = sorted((tmp_path / "out").iterdir())
    assert sorted(strict_json(f / "meta.json")["prompt"] for f in folders) == sorted(set(prompts))
    names = {strict_json(f / "meta.json")["prompt"]: f.name for f in folders}
    assert len(names) == 5 and err.count("wrote ") == 5
    assert names["un cubo rojo"] == "un_cubo_rojo_seed0" and names["一个红色的立方体"] == "一个红色的立方体_seed0"
    assert names["🟥🧊"].startswith("sample_") and names["a red cube"] != names["A Red Cube!"]
    before = {f.name: (f / "latent.pt").read_bytes() for f in folders}
    code, err = run(["text", "--prompts", "p.txt", "-o", "out", *FAST], capsys)  # a re-run keeps them all
    assert code == 0 and err.count("kept ") == 5 and "wrote" not in err
    code, err = run(["text", "--prompts", "p.txt", "-o", "out", "--guidance", "2", *FAST], capsys)
    assert code == 2 and "holds another sample (guidance 3.0 instead of 2.0); pass --overwrite" in one_error_line(err)
    assert {f.name: (f / "latent.pt").read_bytes() for f in folders} == before
    code, err = run(["text", "--prompts", "p.txt", "-o", "out", "--guidance", "2", "--overwrite", *FAST], capsys)
    assert code == 0 and all(strict_json(f / "meta.json")["guidance"] == 2.0 for f in folders)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(before)  # replaced, no temporaries left


def test_a_long_prompt_is_cut_in_a_readable_name_with_its_hash(capsys, tmp_path):
    prompt = "a very " * 10 + "red cube"
    code, err = run(["text", prompt, "-o", "out", *FAST], capsys)
    (folder,) = (tmp_path / "out").iterdir()
    assert code == 0 and folder.name.startswith("a_very_a_very_") and folder.name.endswith("_seed0")
    assert len(folder.name) <= 40 + 1 + 8 + len("_seed0")


@pytest.mark.slow
@pytest.mark.parametrize("command", ["text", "image", "decode"])
def test_texture_writes_a_uv_textured_glb_with_a_real_texture(command, capsys, tmp_path):
    import trimesh
    from PIL import Image

    if command == "decode":
        assert run(["text", "a red cube", "-o", "s", *FAST], capsys)[0] == 0
        argv = ["decode", "s/a_red_cube_seed0/latent.pt", "-o", "out", "--grid-size", "32", "--texture",
                "--texture-size", "256"]
    else:
        Image.new("RGB", (64, 64), (200, 30, 30)).save(tmp_path / "pic.png")
        source = "a red cube" if command == "text" else "pic.png"
        argv = [command, source, "-o", "out", "--texture", "--texture-size", "256", "--steps", "8", "--grid-size", "32",
                "--format", "glb"]
    code, err = run(argv, capsys)
    assert code == 0, err
    glb = next((tmp_path / "out").rglob("mesh_textured.glb"))
    (geometry,) = trimesh.load(glb).geometry.values()
    texture = np.asarray(geometry.visual.material.baseColorTexture.convert("RGB"))
    assert texture.shape[:2] == (256, 256) and geometry.visual.uv.shape == (len(geometry.vertices), 2)
    assert texture.std() > 5 and len(np.unique(texture.reshape(-1, 3), axis=0)) > 20


def test_decode_encode_and_render_work_offline_without_model(capsys, tmp_path):
    import trimesh
    from PIL import Image

    trimesh.creation.box(extents=(1.0, 0.7, 0.5)).export(tmp_path / "box.ply")
    code, err = run(["encode", "box.ply", "-o", "new/latent.pt"], capsys)  # creates the missing folder
    assert code == 0 and "model: transmitter-small (bundled)" in err, err
    code, err = run(["decode", "new/latent.pt", "-o", "mesh", "--grid-size", "16"], capsys)
    assert code == 0 and "model: transmitter-small (fits a latent of 4096 numbers)" in err, err
    assert trimesh.load(tmp_path / "mesh" / "mesh.glb", force="mesh").vertices.shape[1] == 3
    for mode in ("stf", "nerf"):
        gif_path = tmp_path / "newdir" / f"{mode}.gif"
        code, err = run(["render", "new/latent.pt", "-o", str(gif_path), "--size", "32", "--views", "4",
                         "--render-mode", mode], capsys)
        assert code == 0, err
        with Image.open(gif_path) as gif:
            assert gif.n_frames == 4 and np.asarray(gif.convert("RGB")).mean() > 10  # not a black turntable


def test_nerf_turntables_of_a_model_without_nerf_heads_are_refused_naming_stf(capsys, tmp_path, monkeypatch):
    import dataclasses

    from shap_e.models import registry

    spec = registry.MODELS["transmitter-small"]
    monkeypatch.setitem(registry.MODELS, "transmitter-small", dataclasses.replace(spec, render_modes=("stf",)))
    torch.save(torch.zeros(4096), tmp_path / "latent.pt")
    code, err = run(["render", "latent.pt", "-o", "t.gif", "--render-mode", "nerf", "--size", "16"], capsys)
    assert code == 2 and "transmitter-small has no trained NeRF heads" in one_error_line(err)
    assert "--render-mode stf" in err and not (tmp_path / "t.gif").exists()
    code, err = run(["text", "a red cube", "--gif", "--render-mode", "nerf", "-o", "g", *FAST], capsys)
    assert code == 2 and "no trained NeRF heads" in one_error_line(err) and "loaded" not in err


@pytest.mark.parametrize("content, message", [
    (b"", "is empty (0 bytes)"), (b"\x80\x02garbage" * 10, "could not be read"), ("truncated", "could not be read"),
])
def test_unreadable_latents_are_one_line_without_weights_only_advice(content, message, capsys, tmp_path):
    if content == "truncated":
        torch.save(torch.zeros(4096), tmp_path / "full.pt")
        content = (tmp_path / "full.pt").read_bytes()[:500]
    (tmp_path / "latent.pt").write_bytes(content)
    code, err = run(["decode", "latent.pt", "-o", "mesh"], capsys)
    assert code == 2 and message in one_error_line(err) and "weights_only" not in err


def test_latent_dtypes_are_cast_when_float_and_refused_otherwise(capsys, tmp_path):
    torch.save(torch.zeros(4096, dtype=torch.float16), tmp_path / "half.pt")
    assert run(["decode", "half.pt", "-o", "m", "--grid-size", "16"], capsys)[0] == 0
    torch.save(torch.zeros(4096, dtype=torch.int32), tmp_path / "int.pt")
    code, err = run(["decode", "int.pt", "-o", "m2"], capsys)
    assert code == 2 and "holds int32 numbers; a latent is floating point" in one_error_line(err)


def test_output_locations_are_checked_before_any_model_is_loaded(capsys, tmp_path, monkeypatch):
    import shap_e.models.download as download

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the output location was checked")

    monkeypatch.setattr(download, "load_model", refuse)
    (tmp_path / "file").write_text("in the way")
    torch.save(torch.zeros(4096), tmp_path / "latent.pt")
    import trimesh

    trimesh.creation.box().export(tmp_path / "box.ply")
    for argv, message in [
        (["text", "a red cube", "-o", "file/out", *FAST], "file is a file, not a folder"),
        (["encode", "box.ply", "-o", "/proc/shap_e/x.pt"], "cannot write to /proc/shap_e"),
        (["render", "latent.pt", "-o", "file/t.gif"], "file is a file, not a folder"),
        (["decode", "latent.pt", "-o", "file/m"], "file is a file, not a folder"),
    ]:
        code, err = run(argv, capsys)
        assert code == 2 and message in one_error_line(err), (argv, err)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a_red_cube_seed0").write_text("a file where the sample folder goes")
    code, err = run(["text", "a red cube", "-o", "out", *FAST], capsys)
    assert code == 2 and "a_red_cube_seed0 exists and is not a sample folder" in one_error_line(err)


def test_stale_temporaries_of_killed_runs_are_cleaned_on_the_next_run(capsys, tmp_path):
    import multiprocessing

    from shap_e.util.atomic import temporary_path

    process = multiprocessing.get_context("fork").Process(target=os._exit, args=(0,))
    process.start()
    process.join()
    stale = temporary_path(tmp_path / "out" / "a_red_cube_seed0")
    stale = stale.with_name(stale.name.replace(f"-{os.getpid()}-", f"-{process.pid}-"))
    stale.mkdir(parents=True)
    (stale / "latent.pt").write_bytes(b"half")
    code, err = run(["text", "a red cube", "-o", "out", *FAST], capsys)
    assert code == 0 and f"removed {stale.name}, left by an interrupted run" in err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["a_red_cube_seed0"]


def test_batch_samples_are_their_seeds_alone_bit_for_bit_each_in_its_own_latent_file(capsys, tmp_path):
    previous = os.umask(0o022)
    try:
        assert run(["text", "a red cube", "--batch", "3", "-o", "batch", *FAST], capsys)[0] == 0
        assert run(["text", "a red cube", "--seed", "2", "-o", "alone", *FAST], capsys)[0] == 0
    finally:
        os.umask(previous)
    for name in ("latent.pt", "mesh.ply"):
        assert (tmp_path / "batch/a_red_cube_seed2" / name).read_bytes() == (tmp_path / "alone/a_red_cube_seed2" /
                                                                              name).read_bytes()
    for seed in range(3):
        latent = torch.load(tmp_path / f"batch/a_red_cube_seed{seed}/latent.pt", weights_only=True)
        assert latent.shape == (4096,) and latent.untyped_storage().nbytes() == 4096 * 4
    assert stat.S_IMODE((tmp_path / "batch/a_red_cube_seed0").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "batch/a_red_cube_seed0/mesh.ply").stat().st_mode) == 0o644


@pytest.mark.parametrize("argv, message", [
    (["text", "a cube", "--prompts", "p.txt"], "give a prompt or --prompts FILE, not both"),
    (["text", "a cube", "--model", "image-small"], "image-small is an image model: use shap-e image"),
    (["image", "pic.png", "--model", "text-small"], "text-small is a text model: use shap-e text"),
    (["text", "a cube", "--seed", "99999999999999999999"], "--seed must be an integer in [0, 9223372036854775807]"),
    (["text", "a cube", "--grid-size", "100000"], "--grid-size must be an integer in [8, 4096], got 100000"),
    (["text", "a cube", "--batch", "1000000000"], "--batch must be an integer in [1, 10000]"),
    (["render", "latent.pt", "-o", "t.gif", "--size", "4096", "--views", "360"], "needs about"),
    (["text", "a cube", "--steps", "1"], "--steps must be an integer in [2, 10000], got 1"),
])
def test_option_mistakes_are_one_line(argv, message, capsys, tmp_path):
    from PIL import Image

    (tmp_path / "p.txt").write_text("a red cube\n")
    Image.new("RGB", (32, 32), (0, 0, 200)).save(tmp_path / "pic.png")
    torch.save(torch.zeros(4096), tmp_path / "latent.pt")
    code, err = run(argv, capsys)
    assert code == 2 and message in one_error_line(err)


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_a_missing_device_is_named_with_what_is_available(device, capsys):
    from shap_e.util.config import available_devices

    if any(d.startswith(device) for d in available_devices()):
        pytest.skip(f"this computer has {device}")
    code, err = run(["text", "a cube", "--device", device, *FAST[:-2]], capsys)
    assert code == 2 and f"device '{device}' is not available on this computer; available: cpu" in one_error_line(err)


def test_a_two_thousand_word_prompt_is_not_echoed_back(capsys):
    prompt = " ".join(f"word{i}" for i in range(2000))
    code, err = run(["text", prompt, "-o", "long", *FAST], capsys)
    assert code == 0 and len(err) < 3000, len(err)


def test_refinement_shows_progress(capsys, tmp_path):
    import trimesh

    trimesh.creation.box().export(tmp_path / "box.ply")
    code, err = run(["encode", "box.ply", "-o", "x.pt", "--refine-steps", "3"], capsys)
    assert code == 0 and "refining" in err and "3/3" in err
