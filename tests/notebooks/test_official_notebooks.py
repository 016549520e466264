"""The code of the official example notebooks runs here on the bundled small models.

`CELLS` holds the code cells of `openai/shap-e`'s three examples (text to 3D, image to 3D, encode a
model) as their users run them. The test makes a notebook of each and executes it in a kernel
with two kinds of edits only: the model names (`MODEL_NAMES`: the bundled small models, which run
offline) and, to fit a 2-core CI run, smaller numbers (`SMALLER`: batch size, sampler steps,
render sizes). The example files are ours, copied to the paths the official cells open. Nothing
else in the cells changes; each must run without an error, and the outputs they promise (GIF
widgets, PLY/OBJ files) must be there and valid.
"""
import shutil
from pathlib import Path

import pytest
import trimesh

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("ipywidgets")

EXAMPLE_DATA = Path(__file__).resolve().parents[2] / "notebooks" / "example_data"

IMPORTS = """\
import torch

from shap_e.diffusion.sample import sample_latents
from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.models.download import load_model, load_config
from shap_e.util.notebooks import create_pan_cameras, decode_latent_images, gif_widget
"""
DEVICE = "device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')"
SAMPLE = """\
latents = sample_latents(
    batch_size=batch_size,
    model=model,
    diffusion=diffusion,
    guidance_scale=guidance_scale,
    model_kwargs=dict({kwargs}=[{value}] * batch_size),
    progress=True,
    clip_denoised=True,
    use_fp16=True,
    use_karras=True,
    karras_steps=64,
    sigma_min=1e-3,
    sigma_max=160,
    s_churn=0,
)
"""
SHOW = """\
render_mode = 'nerf' # you can change this to 'stf'
size = 64 # this is the size of the renders; higher values take longer to render.

cameras = create_pan_cameras(size, device)
for i, latent in enumerate(latents):
    images = decode_latent_images(xm, latent, cameras, rendering_mode=render_mode)
    display(gif_widget(images))
"""

CELLS = {
    "sample_text_to_3d": [
        IMPORTS,
        DEVICE,
        """\
xm = load_model('transmitter', device=device)
model = load_model('text300M', device=device)
diffusion = diffusion_from_config(load_config('diffusion'))
""",
        """\
batch_size = 4
guidance_scale = 15.0
prompt = "a shark"

""" + SAMPLE.format(kwargs="texts", value="prompt"),
        SHOW,
        """\
# Example of saving the latents as meshes.
from shap_e.util.notebooks import decode_latent_mesh

for i, latent in enumerate(latents):
    t = decode_latent_mesh(xm, latent).tri_mesh()
    with open(f'example_mesh_{i}.ply', 'wb') as f:
        t.write_ply(f)
    with open(f'example_mesh_{i}.obj', 'w') as f:
        t.write_obj(f)
""",
    ],
    "sample_image_to_3d": [
        IMPORTS + "from shap_e.util.image_util import load_image\n",
        DEVICE,
        """\
xm = load_model('transmitter', device=device)
model = load_model('image300M', device=device)
diffusion = diffusion_from_config(load_config('diffusion'))
""",
        """\
batch_size = 4
guidance_scale = 3.0

# To get the best result, you should remove the background and show only the object of interest to the model.
image = load_image("example_data/corgi.png")

""" + SAMPLE.format(kwargs="images", value="image"),
        SHOW,
    ],
    "encode_model": [
        """\
import torch

from shap_e.models.download import load_model
from shap_e.util.data_util import load_or_create_multimodal_batch
from shap_e.util.notebooks import create_pan_cameras, decode_latent_images, gif_widget
""",
        DEVICE,
        "xm = load_model('transmitter', device=device)",
        """\
model_path = "example_data/cactus/object.obj"

# This may take a few minutes, since it requires rendering the model twice
# in two different modes.
batch = load_or_create_multimodal_batch(
    device,
    model_path=model_path,
    mv_light_mode="basic",
    mv_image_size=256,
    cache_dir="example_data/cactus/cached",
    verbose=True, # this will show Blender output during renders
)
""",
        """\
with torch.no_grad():
    latent = xm.encoder.encode_to_bottleneck(batch)

    render_mode = 'stf' # you can change this to 'nerf'
    size = 128 # recommended that you lower resolution when using nerf

    cameras = create_pan_cameras(size, device)
    images = decode_latent_images(xm, latent[0], cameras, rendering_mode=render_mode)
    display(gif_widget(images))
""",
    ],
}
MODEL_NAMES = {
    "load_model('transmitter'": "load_model('transmitter-small'",
    "load_model('text300M'": "load_model('text-small'",
    "load_model('image300M'": "load_model('image-small'",
    "load_config('diffusion')": "load_config('diffusion-small')",
}
SMALLER = {
    "batch_size = 4": "batch_size = 2",
    "karras_steps=64": "karras_steps=8",
    "size = 64 ": "size = 16 ",
    "size = 128 ": "size = 32 ",
    "mv_image_size=256": "mv_image_size=64",
}


def edited(source: str) -> str:
    for table in (MODEL_NAMES, SMALLER):
        for old, new in table.items():
            source = source.replace(old, new)
    return source


def test_the_edits_touch_only_model_names_and_numbers():
    for cells in CELLS.values():
        for cell in cells:
            before, after = cell.splitlines(), edited(cell).splitlines()
            assert len(before) == len(after)
            for old, new in zip(before, after):
                if old != new:
                    assert any(key in old for key in (*MODEL_NAMES, *SMALLER)), old
    assert all("load_model('" in edited(cells[2]) and "-small'" in edited(cells[2]) for cells in CELLS.values())


@pytest.fixture
def example_folder(tmp_path):
    """Our example files at the paths of the official ones (a picture of one object, a 3D model)."""
    folder = tmp_path / "example_data"
    (folder / "cactus").mkdir(parents=True)
    shutil.copy(EXAMPLE_DATA / "red_chair.png", folder / "corgi.png")
    trimesh.load(EXAMPLE_DATA / "mushroom.ply", process=False).export(folder / "cactus" / "object.obj")
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CELLS))
def test_official_notebook_code_runs_on_the_bundled_models(name, example_folder, monkeypatch):
    monkeypatch.setenv("SHAP_E_CACHE", str(example_folder / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(edited(cell)) for cell in CELLS[name]])
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(example_folder)}}
    )
    client.execute()
    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    assert not [output for output in outputs if output.get("output_type") == "error"]
    shown = [o for cell in notebook.cells if "gif_widget(images)" in cell.source for o in cell.outputs]
    widgets = [o for o in shown if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(widgets) == (1 if name == "encode_model" else 2)  # one GIF per latent
    if name == "sample_text_to_3d":
        for i in range(2):
            ply = trimesh.load(example_folder / f"example_mesh_{i}.ply", process=False)
            obj = trimesh.load(example_folder / f"example_mesh_{i}.obj", process=False)
            assert len(ply.faces) == len(obj.faces) > 0
    if name == "encode_model":
        assert any((example_folder / "example_data" / "cactus" / "cached").iterdir())
