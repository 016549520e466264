"""`CliBackend`: the web app's requests run as `shap-e` command lines, with the models loaded once.

Each request becomes the argument list of `shap-e text`, `image`, `encode` or `decode`, parsed by
the command's own parser and run by the command's own functions (`plan_generation` and
`generate_all`, `encode_asset`, `decode_latent`), so the files equal the command's and the page
can show the command line that writes them.
"""
import argparse
import shlex
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import numpy as np
import torch
from PIL import Image

from shap_e.app.backend import EncodeRequest, Outcome, SampleRequest, StepCallback
from shap_e.cli import assets, generate
from shap_e.cli.assets import check_encode, decode_latent, encode_asset
from shap_e.cli.common import CliError
from shap_e.cli.generate import DEFAULT_GUIDANCE, OFFICIAL, SMALL, plan_generation, read_image
from shap_e.cli.pipeline import Pipeline, generate_all, load_pipeline
from shap_e.cli.samples import slug

__all__ = ["CliBackend"]

TRANSMITTERS = ("transmitter", "transmitter-small")
# What every app result holds: all three meshes and a turntable.
OUTPUTS = ["--format", "glb,ply,obj", "--gif"]


class CliBackend:
    """Runs `shap_e.app` requests on `device`, reading weights from `cache_dir` (None: the default)."""

    def __init__(self, device: torch.device, cache_dir: Optional[str] = None) -> None:
        self.device, self.cache_dir = device, cache_dir
        self._parser = command_parser()
        self._lock = threading.Lock()
        self._pipelines: Dict[str, Pipeline] = {}
        self._transmitters: Dict[str, torch.nn.Module] = {}

    def models(self, kind: str) -> List[str]:
        from shap_e.models.download import weights_cached
        from shap_e.models.registry import MODELS

        names = TRANSMITTERS if kind == "encode" else (OFFICIAL[kind], SMALL[kind])
        return [name for name in names if name in MODELS and weights_cached(name, self.cache_dir)]

    def recommended_guidance(self, kind: str, model: str) -> float:
        from shap_e.models.registry import get_spec

        return get_spec(model).guidance_scale or DEFAULT_GUIDANCE[kind]

    def variation_model(self, transmitter: str) -> str:
        from shap_e.models.registry import get_spec

        for name in self.models("text"):
            if transmitter in get_spec(name).decoders:
                return name
        raise ValueError(f"no text model available here decodes with {transmitter!r}")

    def check(self, request: SampleRequest) -> None:
        with _user_errors(), tempfile.TemporaryDirectory(prefix="shap_e_check_") as scratch:
            plan_generation(self._parse(self._sample_argv(request, Path(scratch))))

    def generate(self, request: SampleRequest, output: Path, on_step: StepCallback) -> Outcome:
        with _user_errors():
            args = self._parse(self._sample_argv(request, output))
            plan = plan_generation(args)
            total = len(plan.jobs)
            folders = generate_all(self._pipeline(plan.model), plan, plan.jobs, self.device, args,
                                   callback=lambda info: on_step(info["sample"] * info["steps"] + info["i"] + 1,
                                                                 total * info["steps"]))
        return Outcome(folders, _command(self._sample_argv(request, output, shown=True)), plan.notes)

    def encode(self, request: EncodeRequest, output: Path) -> Outcome:
        with _user_errors():
            encode_args = self._parse(self._encode_argv(request, output))
            decode_args = self._parse(self._decode_argv(request, output))
            check_encode(encode_args)
            transmitter = self._transmitter(request.model)
            encode_asset(encode_args, transmitter, self.device)
            folder = decode_latent(decode_args, transmitter, self.device)
        shown = [_command(argv(request, output, shown=True)) for argv in (self._encode_argv, self._decode_argv)]
        return Outcome([folder], " && ".join(shown), [])

    def model_view(self, model: str, picture: Path) -> Image.Image:
        with _user_errors():
            image = read_image(str(picture))
        return _as_seen_by(self._pipeline(model).prior, image)

    def _sample_argv(self, request: SampleRequest, output: Path, shown: bool = False) -> List[str]:
        """The `shap-e text`/`image` arguments of `request`; `shown`: with files named as on the page."""
        source = Path(request.source).name if shown and request.kind == "image" else request.source
        argv = [request.kind, "--model", request.model, "--seed", str(request.seed), "--batch", str(request.samples),
                "--preset", request.preset, "--grid-size", str(request.grid_size), *OUTPUTS,
                "-o", "out" if shown else str(output)]
        if request.guidance is not None:
            argv += ["--guidance", str(request.guidance)]
        if request.init_latent is not None:
            latent = request.init_latent.name if shown else str(request.init_latent)
            argv += ["--init-latent", latent, "--init-strength", str(request.init_strength)]
        return argv + ["--", source]

    def _encode_argv(self, request: EncodeRequest, output: Path, shown: bool = False) -> List[str]:
        return ["encode", "--model", request.model, "--seed", str(request.seed), "--refine-steps",
                str(request.refine_steps), "-o", "latent.pt" if shown else str(output / "latent.pt"), "--",
                request.asset.name if shown else str(request.asset)]

    def _decode_argv(self, request: EncodeRequest, output: Path, shown: bool = False) -> List[str]:
        return ["decode", "--model", request.model, "--grid-size", str(request.grid_size), *OUTPUTS,
                "-o", "out" if shown else str(output / (slug(request.asset.name) or "asset")), "--",
                "latent.pt" if shown else str(output / "latent.pt")]

    def _parse(self, argv: List[str]):
        """`argv` parsed by the `shap-e` parser, with this backend's model cache."""
        try:
            args = self._parser.parse_args(argv)
        except SystemExit:  # argparse printed the reason on the server's stderr
            raise ValueError(f"the settings do not make a valid `shap-e {argv[0]}` command") from None
        args.cache_dir = self.cache_dir
        return args

    def _pipeline(self, name: str) -> Pipeline:
        with self._lock:
            if name not in self._pipelines:
                self._pipelines[name] = load_pipeline(name, self.device, self.cache_dir)
            return self._pipelines[name]

    def _transmitter(self, name: str) -> torch.nn.Module:
        from shap_e.models.download import load_model

        with self._lock:
            if name not in self._transmitters:
                self._transmitters[name] = load_model(name, device=self.device, cache_dir=self.cache_dir)
            return self._transmitters[name]


def command_parser() -> argparse.ArgumentParser:
    """The `shap-e` parser with the commands the app runs: text, image, encode, decode."""
    parser = argparse.ArgumentParser(prog="shap-e")
    commands = parser.add_subparsers(dest="command", required=True)
    generate.add_commands(commands)
    assets.add_commands(commands)
    return parser


def _command(argv: List[str]) -> str:
    return "shap-e " + shlex.join(argv)


@contextmanager
def _user_errors() -> Iterator[None]:
    """The command's bad-input errors (`CliError`) as the ValueError the app shows."""
    try:
        yield
    except CliError as error:
        raise ValueError(str(error)) from None


def _as_seen_by(prior: torch.nn.Module, image: Image.Image) -> Image.Image:
    """`image` after the prior's own preprocessing (centre crop and resize), as an RGB picture."""
    from shap_e.models.clip import CLIP_MEAN, CLIP_STD, preprocess_images
    from shap_e.models.image_encoder import images_to_pixels

    encoder = getattr(prior, "image_encoder", None)
    if encoder is not None:
        pixels = (images_to_pixels([image], encoder.image_size)[0] + 1) / 2  # [3, S, S] in [0, 1]
    else:
        normalised = preprocess_images([image])[0]
        pixels = normalised * torch.tensor(CLIP_STD).view(3, 1, 1) + torch.tensor(CLIP_MEAN).view(3, 1, 1)
    array = (pixels.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
    return Image.fromarray(np.ascontiguousarray(array))
