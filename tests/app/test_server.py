"""The app through its API (`gradio_client`), as a script or another program would use it: results
equal the `shap-e` command's files byte for byte, bad input comes back as the page's one-line
message (no traceback, no server path), and the cancel button stops a job between two steps."""
import json
import re
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import trimesh
from PIL import Image

from shap_e.cli import main
from tests.app.conftest import MAX_UPLOAD_MB, TEXT

pytestmark = pytest.mark.slow
DOWNLOADS = ["latent.pt", "mesh.glb", "mesh.obj", "mesh.ply", "meta.json"]


def text_to_3d(client, **change):
    return client.predict(*{**TEXT, **change}.values(), api_name="/text_to_3d")


def by_name(files) -> dict:
    return {Path(f).name: Path(f) for f in files}


def app_error(call) -> str:
    """The message of the error the page shows for `call()`."""
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError) as caught:
        call()
    message = str(caught.value)
    assert "Traceback" not in message and not re.search(r"/(tmp|home|root|work)/", message), message
    return message


def test_text_to_3d_returns_the_files_the_command_writes_for_the_same_settings(client, cli_text_sample):
    status, viewer, turntables, files, = text_to_3d(client)
    files = by_name(files)
    assert sorted(files) == DOWNLOADS
    reference = cli_text_sample
    assert Path(viewer).read_bytes() == (reference / "mesh.glb").read_bytes()
    for name in ("mesh.glb", "mesh.ply", "mesh.obj", "latent.pt"):
        assert files[name].read_bytes() == (reference / name).read_bytes(), name
    page_meta, cli_meta = (json.loads(p.read_text()) for p in (files["meta.json"], reference / "meta.json"))
    page_meta.pop("seconds"), cli_meta.pop("seconds")
    assert page_meta == cli_meta
    assert Path(turntables[0]["image"]).read_bytes() == (reference / "turntable.gif").read_bytes()
    assert "shap-e text --model text-small --seed 0 --batch 1 --preset fast --grid-size 64" in status


def test_a_different_seed_gives_a_different_mesh_and_says_so_in_meta(client, cli_text_sample):
    _, viewer, _, files, = text_to_3d(client, seed=1)
    assert json.loads(by_name(files)["meta.json"].read_text())["seed"] == 1
    assert Path(viewer).read_bytes() != (cli_text_sample / "mesh.glb").read_bytes()


def test_image_to_3d_and_the_preview_follow_the_command(client, tmp_path):
    from gradio_client import handle_file

    pixels = np.zeros((60, 80, 4), np.uint8)
    pixels[10:50, 20:60] = (200, 30, 30, 255)  # a red square on a transparent background
    Image.fromarray(pixels).save(tmp_path / "square.png")
    view = np.asarray(Image.open(client.predict(handle_file(str(tmp_path / "square.png")), "image-small",
                                                api_name="/model_view")).convert("RGB"))
    assert view.shape == (256, 256, 3)  # image-small's 64 x 64 input, enlarged
    assert (view[0, 0] == 255).all() and tuple(view[128, 128]) == (200, 30, 30)  # white background, centre crop
    status, viewer, _, files = client.predict(handle_file(str(tmp_path / "square.png")), "image-small", 0, False,
                                              3.0, "fast", 1, 32, api_name="/image_to_3d")
    argv = ["image", str(tmp_path / "square.png"), "--model", "image-small", "--preset", "fast", "--grid-size", "32",
            "--guidance", "3.0", "--format", "glb,ply,obj", "--gif", "--device", "cpu", "-o", str(tmp_path / "cli")]
    assert main(argv) == 0
    assert Path(viewer).read_bytes() == (tmp_path / "cli" / "square_png_seed0" / "mesh.glb").read_bytes()
    assert json.loads(by_name(files)["meta.json"].read_text())["image"] == "square.png"


def test_encode_and_variations_follow_encode_decode_and_text_init_latent(client, tmp_path):
    from gradio_client import handle_file

    trimesh.creation.box(extents=(0.6, 0.4, 0.3)).export(tmp_path / "box.obj")
    encoded = client.predict(handle_file(str(tmp_path / "box.obj")), "transmitter-small", 0, 0, 32,
                             api_name="/encode_mesh")
    cli = tmp_path / "cli"
    assert main(["encode", str(tmp_path / "box.obj"), "-o", str(tmp_path / "latent.pt"), "--model",
                 "transmitter-small", "--device", "cpu"]) == 0
    assert main(["decode", str(tmp_path / "latent.pt"), "-o", str(cli), "--model", "transmitter-small",
                 "--grid-size", "32", "--format", "glb,ply,obj", "--gif", "--device", "cpu"]) == 0
    assert Path(encoded[1]).read_bytes() == (cli / "mesh.glb").read_bytes()
    assert by_name(encoded[3])["latent.pt"].read_bytes() == (cli / "latent.pt").read_bytes()
    status, viewer, _, files = client.predict("a red cube", 0.5, 3, False, 1, 32, api_name="/variations")
    assert main(["text", "a red cube", "--init-latent", str(tmp_path / "latent.pt"), "--init-strength", "0.5",
                 "--seed", "3", "--model", "text-small", "--grid-size", "32", "--format", "glb", "--device", "cpu",
                 "-o", str(tmp_path / "varied")]) == 0
    assert Path(viewer).read_bytes() == (tmp_path / "varied" / "a_red_cube_seed3" / "mesh.glb").read_bytes()
    meta = json.loads(by_name(files)["meta.json"].read_text())
    assert (meta["init_latent"], meta["init_strength"], meta["seed"]) == ("latent.pt", 0.5, 3)


def test_bad_input_comes_back_as_the_pages_one_line_message(client, tmp_path):
    from gradio_client import handle_file

    assert "the prompt is empty" in app_error(lambda: text_to_3d(client, prompt="   "))
    assert "not in the list of choices" in app_error(lambda: text_to_3d(client, model="text300M"))
    assert "greater than maximum value 4" in app_error(lambda: text_to_3d(client, samples=9))
    (tmp_path / "photo.png").write_text("not a picture")
    assert app_error(lambda: client.predict(handle_file(str(tmp_path / "photo.png")), "image-small", 0, False, 3.0,
                                            "fast", 1, 32, api_name="/image_to_3d")) == \
        "'photo.png' is not an image Pillow can read"
    trimesh.PointCloud(np.random.default_rng(0).random((50, 3))).export(tmp_path / "points.ply")
    assert app_error(lambda: client.predict(handle_file(str(tmp_path / "points.ply")), "transmitter-small", 0, 0, 32,
                                            api_name="/encode_mesh")) == \
        "'points.ply' contains no triangles; pass a file with a triangle mesh"
    (tmp_path / "notes.txt").write_text("a chair")
    assert ".glb', '.obj', '.ply', '.stl', '.off'" in app_error(
        lambda: client.predict(handle_file(str(tmp_path / "notes.txt")), "transmitter-small", 0, 0, 32,
                               api_name="/encode_mesh"))
    assert "encode a mesh first" in app_error(lambda: client.predict("a chair", 0.5, 0, False, 1, 32,
                                                                     api_name="/variations"))


def test_a_server_path_sent_instead_of_an_upload_is_refused_without_detail(app_server):
    request = urllib.request.Request(
        f"{app_server.url}gradio_api/call/encode_mesh", method="POST", headers={"Content-Type": "application/json"},
        data=json.dumps({"data": [{"path": "/etc/hostname", "meta": {"_type": "gradio.FileData"}},
                                  "transmitter-small", 0, 0, 32]}).encode())
    with urllib.request.urlopen(request, timeout=30) as response:
        event = json.loads(response.read())["event_id"]
    with urllib.request.urlopen(f"{app_server.url}gradio_api/call/encode_mesh/{event}", timeout=60) as response:
        stream = response.read().decode()
    assert stream.startswith("event: error") and "hostname" not in stream and "Traceback" not in stream


def test_an_upload_over_the_limit_is_refused(client, tmp_path):
    from gradio_client import handle_file

    noise = np.random.default_rng(0).integers(0, 256, (800, 800, 3), dtype=np.uint8)
    Image.fromarray(noise).save(tmp_path / "big.png")
    assert (tmp_path / "big.png").stat().st_size > MAX_UPLOAD_MB * 1024 * 1024
    with pytest.raises(Exception, match="exceeds the maximum file size of 1048576 bytes"):
        client.predict(handle_file(str(tmp_path / "big.png")), "image-small", api_name="/model_view")


def test_the_cancel_button_stops_sampling_between_two_steps(client, app_server):
    job = client.submit(*{**TEXT, "preset": "default"}.values(), api_name="/text_to_3d")
    deadline = time.monotonic() + 120
    while not (job.status().progress_data and job.status().progress_data[0].index):
        assert time.monotonic() < deadline and not job.done(), "the job never reported a sampler step"
        time.sleep(0.05)
    assert client.predict(api_name="/cancel_text") == "Cancelling: the job stops after its current step."
    status = job.result(timeout=120)[0]
    stopped = re.search(r"cancelled at step (\d+) of 64", status)
    assert stopped and int(stopped.group(1)) < 64, status
    assert f"text job cancelled at step {stopped.group(1)} of 64" in app_server.log_text()
    assert client.predict(api_name="/cancel_text") == "Nothing is running."
