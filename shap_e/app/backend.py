"""What the web app asks of the package: requests, their outcomes and the `Backend` that runs them.

The app itself holds the page, the queue and the temporary files; `shap_e.cli.backend.CliBackend`
runs each request through the same code as the `shap-e` command, so a result's files equal the
command's for the same settings.
"""
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Protocol

from PIL import Image

__all__ = ["Backend", "EncodeRequest", "Outcome", "SampleRequest", "StepCallback"]

# (steps done, steps in all) after each sampler step; an exception it raises stops the job there.
StepCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class SampleRequest:
    """One `shap-e text` / `shap-e image` call.

    :param kind: "text" or "image".
    :param source: the prompt, or the path of the uploaded picture.
    :param guidance: classifier-free guidance; None: the model's recommended value.
    :param preset: a name of `shap_e.diffusion.presets.PRESETS`.
    :param init_latent: a latent file to start from (variations), at `init_strength`.
    """

    kind: str
    source: str
    model: str
    seed: int = 0
    samples: int = 1
    guidance: Optional[float] = None
    preset: str = "default"
    grid_size: int = 128
    init_latent: Optional[Path] = None
    init_strength: Optional[float] = None


@dataclass(frozen=True)
class EncodeRequest:
    """`shap-e encode` of an uploaded mesh, then `shap-e decode` of its latent."""

    asset: Path
    model: str
    seed: int = 0
    refine_steps: int = 0
    grid_size: int = 128


@dataclass
class Outcome:
    """Sample folders (latent.pt, mesh.glb/.ply/.obj, turntable.gif, meta.json), the `shap-e`
    command line that writes the same files, and notes for the user."""

    folders: List[Path]
    command: str
    notes: List[str]


class Backend(Protocol):
    """Runs the app's requests; models are loaded once per process. Bad input raises a ValueError
    whose message is meant for the user."""

    def models(self, kind: str) -> List[str]:
        """Registry names usable offline for "text", "image" or "encode" (transmitters), default first."""

    def recommended_guidance(self, kind: str, model: str) -> float:
        """The guidance `shap-e text`/`image` uses for `model` when none is given."""

    def model_view(self, model: str, picture: Path) -> Image.Image:
        """The picture as the image prior `model` sees it: background, crop and size."""

    def check(self, request: SampleRequest) -> None:
        """Raise a ValueError for a request the command would refuse, before any model runs."""

    def generate(self, request: SampleRequest, output: Path, on_step: StepCallback) -> Outcome:
        """Sample and write `request.samples` folders under `output`."""

    def encode(self, request: EncodeRequest, output: Path) -> Outcome:
        """Write `output/latent.pt` and the decoded sample folder under `output`."""

    def variation_model(self, transmitter: str) -> str:
        """The text prior whose latents `transmitter` decodes (for variations of an encoded mesh)."""
