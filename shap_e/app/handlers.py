"""The functions the page's buttons call: check the inputs, run the job, show its result.

Each job function returns the result panel's values `(status, viewer, turntables, downloads,
folders)`. Bad input raises `gr.Error` with a one-line message and no server path; any other
failure is logged with its traceback on the server and shown as one line.
"""
import secrets
import time
import traceback
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Tuple

import gradio as gr
from PIL import Image

from shap_e.app.backend import Backend, EncodeRequest, Outcome, SampleRequest
from shap_e.app.jobs import Cancelled, Job, Jobs, log
from shap_e.app.uploads import MESH_TYPES, PICTURE_TYPES, InputError, check_upload, public_message

__all__ = ["DOWNLOADS", "LIMITS", "Handlers"]

DOWNLOADS = ("mesh.glb", "mesh.ply", "mesh.obj", "latent.pt", "meta.json")
# Slider ranges (Gradio refuses values outside them): they keep one visitor from taking the server's memory.
LIMITS = {"samples": (1, 4), "grid_size": (16, 256), "refine_steps": (0, 1000)}
PREVIEW_SIZE = 256
Panel = Tuple[str, Optional[str], List[Tuple[str, str]], List[str], List[str]]


def _seed(seed: int, random_seed: bool) -> int:
    return secrets.randbelow(2**31) if random_seed else int(seed)


def sample_request(kind, source, model, seed, random_seed, guidance, preset, samples, grid_size,
                   **extra) -> SampleRequest:
    """The page's values as a request (Gradio has checked each against its control's choices and range)."""
    return SampleRequest(kind, source, model, _seed(seed, random_seed), int(samples), guidance, preset,
                         int(grid_size), **extra)


def panel(outcome: Outcome, seconds: float) -> Panel:
    """The result panel for `outcome`: the first sample in the viewer and the downloads."""
    folders = outcome.folders
    lines = [f"{len(folders)} sample{'s' if len(folders) > 1 else ''} in {seconds:.1f} s."]
    lines += outcome.notes
    lines += ["The same files from the command line:", f"```\n{outcome.command}\n```"]
    turntables = [(str(f / "turntable.gif"), f.name) for f in folders if (f / "turntable.gif").is_file()]
    first = folders[0]
    return "\n\n".join(lines), str(first / "mesh.glb"), turntables, sample_files(first), [str(f) for f in folders]


def sample_files(folder: Path) -> List[str]:
    return [str(folder / name) for name in DOWNLOADS if (folder / name).is_file()]


class Handlers:
    """The page's event functions over one `Backend` and one `Jobs`."""

    def __init__(self, backend: Backend, jobs: Jobs, upload_root: Path, max_upload_bytes: int) -> None:
        self.backend, self.jobs = backend, jobs
        self.upload_root, self.max_upload_bytes = upload_root, max_upload_bytes

    def _upload(self, path: Optional[str], types: Sequence[str], what: str) -> Path:
        return check_upload(path, types, what, self.max_upload_bytes, self.upload_root)

    def _run(self, tab: str, model: str, work: Callable[[Job], Outcome], request: gr.Request,
             progress: gr.Progress) -> Panel:
        """Run `work` as a job of this page tab; map its outcome or failure to the page."""
        started = time.monotonic()
        try:
            with self.jobs.run(request.session_hash, tab, model,
                               on_wait=lambda: progress(0, desc=f"waiting: {model} runs one job at a time")) as job:
                progress(0, desc="starting")
                outcome = work(job)
        except Cancelled as stop:
            log(f"{tab} job {stop}")
            return f"Cancelled ({stop}).", None, [], [], []
        except (ValueError, FileNotFoundError, PermissionError) as error:
            raise gr.Error(public_message(error), print_exception=False) from None
        except Exception:
            log(f"{tab} job failed:\n{traceback.format_exc()}")
            raise gr.Error("the job failed on the server (its log has the details); try other settings",
                           print_exception=False) from None
        return panel(outcome, time.monotonic() - started)

    def _sample(self, tab: str, request: SampleRequest, page: gr.Request, progress: gr.Progress) -> Panel:
        def work(job: Job) -> Outcome:
            def on_step(done: int, total: int) -> None:
                job.step = (done, total)
                job.check()
                progress((done, total), desc="sampling" if done < total else "writing meshes", unit="steps")

            return self.backend.generate(request, job.folder, on_step)

        try:
            self.backend.check(request)
        except ValueError as error:
            raise gr.Error(public_message(error), print_exception=False) from None
        return self._run(tab, request.model, work, page, progress)

    def text_to_3d(self, prompt: str, model: str, seed: int, random_seed: bool, guidance: float, preset: str,
                   samples: int, grid_size: int, request: gr.Request, progress=gr.Progress()) -> Panel:
        sample = sample_request("text", prompt or "", model, seed, random_seed, guidance, preset, samples, grid_size)
        return self._sample("text", sample, request, progress)

    def image_to_3d(self, picture: Optional[str], model: str, seed: int, random_seed: bool, guidance: float,
                    preset: str, samples: int, grid_size: int, request: gr.Request, progress=gr.Progress()) -> Panel:
        try:
            path = self._upload(picture, PICTURE_TYPES, "picture")
            sample = sample_request("image", str(path), model, seed, random_seed, guidance, preset, samples,
                                    grid_size)
        except InputError as error:
            raise gr.Error(str(error), print_exception=False) from None
        return self._sample("image", sample, request, progress)

    def model_view(self, picture: Optional[str], model: str) -> Optional[Image.Image]:
        """The uploaded picture as the image prior sees it, enlarged (nearest) for the page."""
        if not picture:
            return None
        try:
            view = self.backend.model_view(model, self._upload(picture, PICTURE_TYPES, "picture"))
        except ValueError as error:
            raise gr.Error(public_message(error), print_exception=False) from None
        if view.width < PREVIEW_SIZE:
            view = view.resize((PREVIEW_SIZE, PREVIEW_SIZE), Image.NEAREST)
        return view

    def show_mesh(self, mesh: Optional[str]) -> Optional[str]:
        """The uploaded mesh for the input viewer (OFF files, which it cannot show, give none)."""
        if not mesh:
            return None
        try:
            path = self._upload(mesh, MESH_TYPES, "mesh")
        except InputError as error:
            raise gr.Error(str(error), print_exception=False) from None
        return str(path) if path.suffix.lower() != ".off" else None

    def encode_mesh(self, mesh: Optional[str], model: str, seed: int, refine_steps: int, grid_size: int,
                    request: gr.Request, progress=gr.Progress()) -> Tuple[Any, ...]:
        """Encode the uploaded mesh; the panel plus the latent file and transmitter for variations."""
        try:
            encode = EncodeRequest(self._upload(mesh, MESH_TYPES, "mesh"), model, int(seed), int(refine_steps),
                                   int(grid_size))
        except InputError as error:
            raise gr.Error(str(error), print_exception=False) from None

        def work(job: Job) -> Outcome:
            progress(0.1, desc="encoding and decoding")
            return self.backend.encode(encode, job.folder)

        result = self._run("encode", encode.model, work, request, progress)
        latent = str(Path(result[4][0]).parent / "latent.pt") if result[4] else None
        return (*result, latent, encode.model if latent else None)

    def variations(self, latent: Optional[str], transmitter: Optional[str], prompt: str, strength: float,
                   seed: int, random_seed: bool, samples: int, grid_size: int, request: gr.Request,
                   progress=gr.Progress()) -> Panel:
        try:
            if not latent or not transmitter:
                raise InputError("encode a mesh first: variations start from its latent")
            if not Path(latent).is_file():
                raise InputError("the encoded latent has expired (shap-e app --keep-minutes); encode the mesh again")
            model = self.backend.variation_model(transmitter)
            sample = sample_request("text", prompt or "", model, seed, random_seed, None, "default", samples,
                                    grid_size, init_latent=Path(latent), init_strength=strength)
        except ValueError as error:
            raise gr.Error(public_message(error), print_exception=False) from None
        return self._sample("encode", sample, request, progress)

    def select(self, folders: List[str], event: gr.SelectData) -> Tuple[str, List[str]]:
        """Show the sample picked in the turntable gallery."""
        folder = Path(folders[event.index])
        if not (folder / "mesh.glb").is_file():
            raise gr.Error("these files have expired (shap-e app --keep-minutes); run the job again",
                           print_exception=False)
        return str(folder / "mesh.glb"), sample_files(folder)

    def canceller(self, tab: str) -> Callable[[gr.Request], str]:
        """The cancel button's function for `tab`: stops that tab's running job between two steps."""

        def cancel(request: gr.Request) -> str:
            running = self.jobs.cancel(request.session_hash, tab)
            return "Cancelling: the job stops after its current step." if running else "Nothing is running."

        return cancel
