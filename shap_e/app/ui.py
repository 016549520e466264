"""The page: three tabs (Text → 3D, Image → 3D, Encode) and a result panel each.

Every result panel shows the first sample in a 3D viewer, all samples' turntables (pick one to
view it), and the sample's files. The API names (`/text_to_3d`, `/image_to_3d`, `/model_view`,
`/encode_mesh`, `/variations`, `/cancel_<tab>`) are what `gradio_client` calls.
"""
from dataclasses import dataclass
from typing import Any, List

import gradio as gr

from shap_e.app.backend import Backend
from shap_e.app.handlers import LIMITS, Handlers
from shap_e.app.uploads import MESH_TYPES, PICTURE_TYPES

__all__ = ["build_demo", "theme"]

JOBS = {"concurrency_id": "jobs", "concurrency_limit": 2}  # one running job per model, two models at most
# Degrees around and down from the vertical, and a distance that frames the [-1, 1]^3 box of a mesh.
CAMERA = (45, 65, 4.5)
PRESET_CHOICES = [("official: 64 Heun steps", "default"), ("fast: DPM-Solver++(2M)", "fast")]
INTRO = """# Shap-E
Text, a picture or a mesh → a 3D model. Every result comes with its GLB, PLY and OBJ meshes, its
latent and a `meta.json`, and the `shap-e` command line that writes the same files."""


def theme() -> gr.themes.Base:
    """The default look with the system's fonts: the page loads nothing from outside the server."""
    return gr.themes.Default(font=["ui-sans-serif", "system-ui", "sans-serif"],
                             font_mono=["ui-monospace", "SFMono-Regular", "monospace"])


@dataclass
class ResultPanel:
    """A result's components; `folders` (server side only) holds the sample folders shown."""

    status: Any
    viewer: Any
    turntables: Any
    files: Any
    folders: Any

    @property
    def outputs(self) -> List[Any]:
        return [self.status, self.viewer, self.turntables, self.files, self.folders]


def result_panel(handlers: Handlers, tab: str, label: str = "3D model") -> ResultPanel:
    viewer = gr.Model3D(label=label, clear_color=(1.0, 1.0, 1.0, 1.0), camera_position=CAMERA, height=420,
                        elem_id=f"{tab}-viewer")
    status = gr.Markdown(label="status", elem_id=f"{tab}-status")
    turntables = gr.Gallery(label="Turntables (pick one to view it)", columns=4, height=180, object_fit="contain",
                            elem_id=f"{tab}-turntables")
    files = gr.File(label="Downloads", file_count="multiple", interactive=False, elem_id=f"{tab}-files")
    folders = gr.State([])
    turntables.select(handlers.select, [folders], [viewer, files], api_visibility="private")
    return ResultPanel(status, viewer, turntables, files, folders)


def sampling_controls(backend: Backend, kind: str) -> List[Any]:
    """Model, seed, random seed, guidance, sampler preset, samples, mesh grid: the job's inputs."""
    models = backend.models(kind)
    model = gr.Dropdown(models, value=models[0] if models else None, label="Model")
    with gr.Row():
        seed = gr.Number(0, precision=0, minimum=0, label="Seed")
        random_seed = gr.Checkbox(False, label="Random seed")
    guidance = gr.Slider(0, 20, value=backend.recommended_guidance(kind, models[0]) if models else 3.0, step=0.5,
                         label="Guidance (the model's recommended value)")
    model.change(lambda name: backend.recommended_guidance(kind, name) if name else gr.skip(), [model], [guidance],
                 api_visibility="private")
    with gr.Accordion("More settings", open=False):
        preset = gr.Dropdown(PRESET_CHOICES, value="default", label="Sampler")
        samples = gr.Slider(*LIMITS["samples"], value=1, step=1, label="Samples")
        grid_size = gr.Slider(*LIMITS["grid_size"], value=128, step=16, label="Mesh grid")
    return [model, seed, random_seed, guidance, preset, samples, grid_size]


def buttons(tab: str, action: str):
    with gr.Row():
        run = gr.Button(action, variant="primary", elem_id=f"{tab}-run")
        cancel = gr.Button("Cancel", elem_id=f"{tab}-cancel")
    return run, cancel


def text_tab(handlers: Handlers, backend: Backend) -> None:
    with gr.Row():
        with gr.Column(scale=1):
            prompt = gr.Textbox(label="Prompt", placeholder="a red cube", elem_id="text-prompt")
            controls = sampling_controls(backend, "text")
            run, cancel = buttons("text", "Generate")
        with gr.Column(scale=2):
            result = result_panel(handlers, "text")
    job = run.click(handlers.text_to_3d, [prompt, *controls], result.outputs, api_name="text_to_3d", **JOBS)
    prompt.submit(handlers.text_to_3d, [prompt, *controls], result.outputs, api_visibility="private", **JOBS)
    cancel.click(handlers.canceller("text"), None, [result.status], cancels=[job], api_name="cancel_text", queue=False)


def image_tab(handlers: Handlers, backend: Backend) -> None:
    with gr.Row():
        with gr.Column(scale=1):
            picture = gr.File(label="Picture of one object", file_types=list(PICTURE_TYPES), type="filepath",
                              elem_id="image-picture")
            view = gr.Image(label="As the model sees it", type="pil", format="png", interactive=False, height=256)
            controls = sampling_controls(backend, "image")
            run, cancel = buttons("image", "Generate")
        with gr.Column(scale=2):
            result = result_panel(handlers, "image")
    gr.on([picture.change, controls[0].change], handlers.model_view, [picture, controls[0]], [view],
          api_name="model_view")
    job = run.click(handlers.image_to_3d, [picture, *controls], result.outputs, api_name="image_to_3d", **JOBS)
    cancel.click(handlers.canceller("image"), None, [result.status], cancels=[job], api_name="cancel_image",
                 queue=False)


def encode_tab(handlers: Handlers, backend: Backend) -> None:
    transmitters = backend.models("encode")
    latent, transmitter = gr.State(None), gr.State(None)
    with gr.Row():
        with gr.Column(scale=1):
            mesh = gr.File(label="Mesh", file_types=list(MESH_TYPES), type="filepath", elem_id="encode-mesh")
            model = gr.Dropdown(transmitters, value=transmitters[0] if transmitters else None, label="Transmitter")
            seed = gr.Number(0, precision=0, minimum=0, label="Seed")
            refine = gr.Slider(*LIMITS["refine_steps"], value=0, step=50, label="Refinement steps (400 is good)")
            grid_size = gr.Slider(*LIMITS["grid_size"], value=128, step=16, label="Mesh grid")
            run, cancel = buttons("encode", "Encode")
        with gr.Column(scale=2):
            with gr.Row():
                given = gr.Model3D(label="Input", clear_color=(1.0, 1.0, 1.0, 1.0), camera_position=CAMERA, height=420)
                with gr.Column():
                    result = result_panel(handlers, "encode", label="Decoded from its latent")
    mesh.change(handlers.show_mesh, [mesh], [given], api_visibility="private")
    job = run.click(handlers.encode_mesh, [mesh, model, seed, refine, grid_size],
                    [*result.outputs, latent, transmitter], api_name="encode_mesh", **JOBS)
    gr.Markdown("### Variations\nSample again from the encoded latent with some noise added: the higher the "
                "strength, the further from the input.")
    with gr.Row():
        with gr.Column(scale=1):
            prompt = gr.Textbox(label="What it is (the text prior reads it)", placeholder="a chair")
            strength = gr.Slider(0.05, 1.0, value=0.5, step=0.05, label="Strength (SDEdit)")
            with gr.Row():
                var_seed = gr.Number(0, precision=0, minimum=0, label="Seed")
                random_seed = gr.Checkbox(False, label="Random seed")
            samples = gr.Slider(*LIMITS["samples"], value=2, step=1, label="Samples")
            vary = gr.Button("Make variations", variant="primary", elem_id="variations-run")
        with gr.Column(scale=2):
            varied = result_panel(handlers, "variations")
    variation_job = vary.click(handlers.variations, [latent, transmitter, prompt, strength, var_seed, random_seed,
                                                     samples, grid_size], varied.outputs, api_name="variations",
                               **JOBS)
    cancel.click(handlers.canceller("encode"), None, [result.status], cancels=[job, variation_job],
                 api_name="cancel_encode", queue=False)


def build_demo(handlers: Handlers, backend: Backend, keep_seconds: float) -> gr.Blocks:
    """The page; Gradio deletes its own copies of uploads and results `keep_seconds` after they were made."""
    keep = max(1, int(keep_seconds))
    with gr.Blocks(title="Shap-E", analytics_enabled=False, delete_cache=(max(1, keep // 4), keep)) as demo:
        gr.Markdown(INTRO)
        with gr.Tab("Text → 3D"):
            text_tab(handlers, backend)
        with gr.Tab("Image → 3D"):
            image_tab(handlers, backend)
        with gr.Tab("Encode"):
            encode_tab(handlers, backend)
    return demo
