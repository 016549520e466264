"""`--max-faces` of `shap-e text`, `image` and `decode` on the bundled models: every mesh file holds at
most that many faces with its vertex colours, meta.json records it, and a bad value is one line."""
import json

import numpy as np
import pytest
import trimesh

from tests.cli.conftest import run


pytestmark = pytest.mark.usefixtures("offline_cache")


def load_mesh(path) -> trimesh.Trimesh:
    loaded = trimesh.load(path, process=False)
    return loaded.to_geometry() if isinstance(loaded, trimesh.Scene) else loaded


def red_share(mesh: trimesh.Trimesh) -> float:
    """The share of vertices whose linear colour is mostly red."""
    rgb = mesh.visual.vertex_colors[:, :3].astype(np.float32) / 255
    return float(np.mean((rgb[:, 0] > 0.5) & (rgb[:, 1] < 0.3) & (rgb[:, 2] < 0.3)))


def test_text_and_decode_write_every_mesh_file_within_max_faces_with_its_colours(capsys, tmp_path):
    base = ["--model", "text-small", "--preset", "fast", "--grid-size", "48", "--format", "glb,ply,obj",
            "--device", "cpu"]
    code, err = run(["text", "a red cube", "-o", "full", *base], capsys)
    assert code == 0, err
    full = load_mesh(tmp_path / "full/a_red_cube_seed0/mesh.ply")
    assert len(full.faces) > 4000  # the budget below cuts it
    code, err = run(["text", "a red cube", "-o", "light", "--max-faces", "1000", *base], capsys)
    assert code == 0, err
    assert f"from {len(full.faces)} to " in err
    sample = tmp_path / "light/a_red_cube_seed0"
    for name in ("mesh.glb", "mesh.ply", "mesh.obj"):
        mesh = load_mesh(sample / name)
        assert 500 < len(mesh.faces) <= 1000, name
        assert red_share(mesh) > 0.9 and red_share(full) > 0.9, name  # "a red cube" stays red
        np.testing.assert_allclose(mesh.bounds, full.bounds, atol=0.05)  # and the same size and place
    meta = json.loads((sample / "meta.json").read_text())
    assert meta["max_faces"] == 1000 and "decimation" in meta["seconds"]
    assert json.loads((tmp_path / "full/a_red_cube_seed0/meta.json").read_text())["max_faces"] is None

    code, err = run(["text", "a red cube", "-o", "light", "--max-faces", "1000", *base], capsys)
    assert code == 0 and "kept " in err  # the same setting keeps the folder
    code, err = run(["text", "a red cube", "-o", "light", "--max-faces", "2000", *base], capsys)
    assert code == 2 and "holds another sample (max_faces 1000 instead of 2000)" in err

    code, err = run(["decode", "full/a_red_cube_seed0/latent.pt", "-o", "decoded", "--max-faces", "800",
                     "--texture", *base[4:]], capsys)
    assert code == 0, err
    for name in ("mesh.glb", "mesh_textured.glb"):  # the textured GLB too
        assert 400 < len(load_mesh(tmp_path / "decoded" / name).faces) <= 800, name
    assert json.loads((tmp_path / "decoded/meta.json").read_text())["max_faces"] == 800


def test_image_writes_its_meshes_within_max_faces(capsys, tmp_path):
    from PIL import Image

    picture = Image.new("RGB", (64, 64), "white")
    picture.paste((200, 30, 30), (16, 16, 48, 48))
    picture.save(tmp_path / "red.png")
    code, err = run(["image", "red.png", "--model", "image-small", "--preset", "fast", "--grid-size", "32",
                     "--format", "glb,obj", "--max-faces", "300", "--device", "cpu", "-o", "out"], capsys)
    assert code == 0 and "decimated the mesh of" in err, err
    (sample,) = (tmp_path / "out").iterdir()
    assert all(len(load_mesh(sample / name).faces) <= 300 for name in ("mesh.glb", "mesh.obj"))
    assert json.loads((sample / "meta.json").read_text())["max_faces"] == 300


@pytest.mark.parametrize("command", [["text", "a red cube"], ["image", "missing.png"], ["decode", "missing.pt"]])
@pytest.mark.parametrize("bad", ["0", "-1", "3", "abc"])
def test_a_bad_max_faces_is_one_line_and_exit_status_2_before_anything_is_read(command, bad, capsys, tmp_path):
    code, err = run([*command, "-o", "out", f"--max-faces={bad}"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--max-faces" in err and "Traceback" not in err
    assert "does not exist" not in err  # refused before the picture or the latent is read
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_grid_128_red_cube_within_20000_faces_is_a_glb_under_1_mb_with_vertex_colours(capsys, tmp_path):
    code, err = run(["text", "a red cube", "--model", "text-small", "--max-faces", "20000", "--format", "glb",
                     "--device", "cpu", "-o", "out"], capsys)
    assert code == 0, err
    glb = tmp_path / "out/a_red_cube_seed0/mesh.glb"
    assert glb.stat().st_size < 1_000_000
    mesh = load_mesh(glb)
    assert 10_000 < len(mesh.faces) <= 20_000 and mesh.visual.kind == "vertex" and red_share(mesh) > 0.9
