"""Registry of downloadable models: name -> shipped config, weights URL and sha256.

The URLs and hashes are those of the official Shap-E release; the configs ship inside the package
(`shap_e/configs/`), so only weights ever need a download. Further models (for example small
bundled ones) are added with `register_model`.
"""
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

__all__ = [
    "ModelSpec", "MODELS", "CONFIG_DIR", "KINDS", "WEIGHTS_DIR", "get_spec", "register_model", "register_from_file",
    "config_path",
]

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
WEIGHTS_DIR = Path(__file__).resolve().parent.parent / "weights"

_BASE_URL = "https://openaipublic.azureedge.net/main/shap-e"
KINDS = ("text", "image", "transmitter", "decoder", "diffusion")


@dataclass(frozen=True)
class ModelSpec:
    """Where a model's config and weights come from.

    :param name: registry key, e.g. ``"text300M"``.
    :param config_file: YAML file name inside ``shap_e/configs/``, or an absolute path.
    :param url: weights URL; ``None`` for config-only entries (``"diffusion"``).
    :param sha256: hex sha256 of the weights file (required when ``url`` is set).
    :param config_url: where the official copy of the config can be downloaded, if anywhere.
    :param config_sha256: official sha256 of the file at ``config_url`` (checked on download).
    :param description: one line for listings and error messages.
    :param n_params: total parameter count of the built model (``model.parameters()``).
    :param config_reconstructed: True when the shipped YAML is a reconstruction whose bytes do not
        hash to ``config_sha256`` (the decoder); False when they do.
    :param decoders: for a prior, the models that decode its latents, in order of preference.
    :param diffusion: for a prior, the registry name of its diffusion config.
    :param guidance_scale: for a prior, the classifier-free guidance it samples best with (the CLI's
        default for it); None keeps the command's own default.
    :param guidance_max_sigma: for a prior, guide only the sampler steps at sigma <= this value and
        use the conditional prediction alone above it (`sample_latents(guidance_max_sigma=...)`; the
        CLI's default for it); None guides every step.
    :param init_strength: for a prior with a latent head (`regress_latent`), the SDEdit strength in
        (0, 1) at which sampling starts from the head's latent instead of from noise (the CLI's
        default for it); None samples from noise.
    :param weights_file: weights that ship with the package (a name inside ``shap_e/weights/``, or
        an absolute path), checked against ``sha256`` when loaded; nothing is downloaded.
    :param kind: what the model is, one of ``KINDS``: ``"text"`` or ``"image"`` (a prior, for
        `shap-e text` / `shap-e image`), ``"transmitter"`` (encoder and renderer), ``"decoder"``
        (renderer only) or ``"diffusion"`` (a config); None (models registered without it): not checked.
    :param render_modes: for a transmitter or decoder, the rendering modes whose heads are trained
        (``"stf"``, ``"nerf"``), the preferred first; `decode_latent_images` refuses the others.
    """

    name: str
    config_file: str
    url: Optional[str] = None
    sha256: Optional[str] = None
    config_url: Optional[str] = None
    config_sha256: Optional[str] = None
    description: str = ""
    n_params: Optional[int] = None
    config_reconstructed: bool = False
    decoders: Tuple[str, ...] = ()
    diffusion: str = "diffusion"
    guidance_scale: Optional[float] = None
    guidance_max_sigma: Optional[float] = None
    init_strength: Optional[float] = None
    weights_file: Optional[str] = None
    kind: Optional[str] = None
    render_modes: Tuple[str, ...] = ("stf", "nerf")

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in KINDS:
            raise ValueError(f"ModelSpec {self.name!r}: kind={self.kind!r} must be one of {KINDS} or None")
        if not self.render_modes or not set(self.render_modes) <= {"stf", "nerf"}:
            raise ValueError(f"ModelSpec {self.name!r}: render_modes={self.render_modes!r} must name 'stf' and/or 'nerf'")
        if self.url is not None and self.weights_file is not None:
            raise ValueError(f"ModelSpec {self.name!r}: give url (download) or weights_file (bundled), not both")
        if self.has_weights and not _is_sha256(self.sha256):
            raise ValueError(
                f"ModelSpec {self.name!r}: sha256={self.sha256!r} must be 64 hex digits when url or weights_file is set"
            )
        if self.guidance_max_sigma is not None:
            from shap_e.diffusion.presets import check_guidance_max_sigma

            check_guidance_max_sigma(self.guidance_max_sigma, f"ModelSpec {self.name!r}: guidance_max_sigma")
        if self.init_strength is not None and not 0 < self.init_strength < 1:
            raise ValueError(f"ModelSpec {self.name!r}: init_strength={self.init_strength} must be in (0, 1) or None")
        if self.config_sha256 is not None and not _is_sha256(self.config_sha256):
            raise ValueError(
                f"ModelSpec {self.name!r}: config_sha256={self.config_sha256!r} must be 64 hex digits or None"
            )

    @property
    def has_weights(self) -> bool:
        """True when the entry names a weights file (False for config-only entries)."""
        return self.url is not None or self.weights_file is not None

    @property
    def bundled_weights(self) -> Optional[Path]:
        """The path of weights shipped with the package, or None for downloadable ones."""
        if self.weights_file is None:
            return None
        path = Path(self.weights_file)
        return path if path.is_absolute() else WEIGHTS_DIR / path


def _is_sha256(value: Optional[str]) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


MODELS: Dict[str, ModelSpec] = {}


def register_model(spec: ModelSpec, overwrite: bool = False) -> ModelSpec:
    """Add ``spec`` to ``MODELS``; re-registering a name needs ``overwrite=True``."""
    if not isinstance(spec, ModelSpec):
        raise ValueError(f"spec must be a ModelSpec, got {type(spec).__name__}")
    if spec.name in MODELS and not overwrite:
        raise ValueError(f"model {spec.name!r} is already registered; pass overwrite=True to replace it")
    MODELS[spec.name] = spec
    return spec


def get_spec(name: str) -> ModelSpec:
    """Look up a registered model, with an error that lists the valid names."""
    if name not in MODELS:
        raise ValueError(f"unknown model name {name!r}; valid names are: {', '.join(sorted(MODELS))}")
    return MODELS[name]


def config_path(spec: ModelSpec) -> Path:
    """Absolute path of the spec's YAML config (relative names resolve inside ``shap_e/configs``)."""
    path = Path(spec.config_file)
    return path if path.is_absolute() else CONFIG_DIR / path


def _official(name: str, kind: str, stem: str, config_stem: str, sha: Optional[str], config_sha: Optional[str],
              description: str, n_params: Optional[int], reconstructed: bool = False,
              decoders: Tuple[str, ...] = ()) -> ModelSpec:
    return ModelSpec(
        name=name,
        config_file=f"{config_stem}.yaml",
        url=f"{_BASE_URL}/{stem}.pt" if stem else None,
        sha256=sha,
        config_url=f"{_BASE_URL}/{config_stem}.yaml",
        config_sha256=config_sha,
        description=description,
        n_params=n_params,
        config_reconstructed=reconstructed,
        decoders=decoders,
        kind=kind,
    )


# Hashes and parameter counts are those of the official release (docs/behaviour.md#checkpoints).
for _spec in (
    _official("transmitter", "transmitter", "transmitter", "transmitter_config",
              "af02a0b85a8abdfb3919584b63c540ba175f6ad4790f574a7fef4617e5acdc3b",
              "ffe1bcb405104a37d9408391182ab118a4ef313c391e07689684f1f62071605e",
              "encoder (point cloud + multiview renders -> latent) and NeRSTF renderer", 443_771_357),
    _official("decoder", "decoder", "vector_decoder", "vector_decoder_config",
              "d7e7ebbfe3780499ae89b2da5e7c1354012dba5a6abfe295bed42f25c3be1b98",
              "e6d373649f8e24d85925f4674b9ac41c57aba5f60e42cde6d10f87381326365c",
              "latent -> NeRSTF renderer only (no encoder)", 226_076_870,
              reconstructed=True),  # shipped YAML rebuilt from the spec; official bytes differ
    _official("text300M", "text", "text_cond", "text_cond_config",
              "e6b4fa599a7b3c3b16c222d5f5fe56f9db9289ff0b6575fbe5c11bc97106aad4",
              "f290beeea3d3e9ff15db01bde5382b6e549e463060c0744f89c049505be246c1",
              "text-conditional latent diffusion transformer (CLIP text embedding)", 315_692_032,
              decoders=("decoder", "transmitter")),
    _official("image300M", "image", "image_cond", "image_cond_config",
              "cb8072c64bbbcf6910488814d212227de5db291780d4ea99c6152f9346cf12aa",
              "4e0745605a533c543c72add803a78d233e2a6401e0abfa0cad58afb4d74ad0b0",
              "image-conditional latent diffusion transformer (CLIP image grid)", 315_956_224,
              decoders=("decoder", "transmitter")),
    _official("diffusion", "diffusion", "", "diffusion_config", None,
              "efcb2cd7ee545b2d27223979d41857802448143990572a42645cd09c2942ed57",
              "Gaussian diffusion schedule (config only, no weights)", None),
):
    register_model(_spec)
del _spec


# The small model family: trained on this package's procedural dataset with `recipes/` on a 2-core
# CPU and bundled in `shap_e/weights/` (model cards in `model_cards/`).
for _spec in (
    ModelSpec("diffusion-small", "diffusion_small_config.yaml", kind="diffusion",
              description="Gaussian diffusion of the small priors: cosine schedule, v prediction (config only)"),
    ModelSpec("transmitter-small", "transmitter_small_config.yaml",
              sha256="00e0c8ffae7c899d19d04f1614467c96d5f88fda81fb4e0e62c6a2698199294d",
              weights_file="transmitter-small.safetensors", n_params=787_130, kind="transmitter",
              render_modes=("stf", "nerf"),  # NeRF heads derived from the SDF and STF heads (models.nerstf.derived_heads)
              description="small points-only encoder + renderer for procedural shapes (bundled)"),
    ModelSpec("text-small", "text_small_config.yaml",
              sha256="8833409634d879769a36a3567ece8ad62c5821b2f9737d2ee24a7e31c798f727",
              weights_file="text-small.safetensors", n_params=1_009_229, decoders=("transmitter-small",), kind="text",
              guidance_scale=3.0, guidance_max_sigma=2.5, diffusion="diffusion-small",
              description="small text prior (MiniLM token states and a colour hint) for procedural shapes (bundled)"),
    ModelSpec("image-small", "image_small_config.yaml",
              sha256="80184b0c1f18cdf2b7b7c0abe861060e77efb0bda96f1bd3285e099e73f9841b",
              weights_file="image-small.safetensors", n_params=3_653_440, decoders=("transmitter-small",), kind="image",
              guidance_scale=2.0, init_strength=0.2, diffusion="diffusion-small",
              description="small image prior with its own image encoder, procedural shapes (bundled)"),
):
    register_model(_spec)
del _spec


def register_from_file(path) -> None:
    """Register the models of a YAML file: `{name: {config_file, url, sha256, ...}}` (ModelSpec fields).

    Lets users add their own fine-tuned models (and tests add tiny ones); `url` may be `file://`.
    The cache keeps downloaded weights under the URL's file name: two entries whose URLs end in the
    same name (`runs/a/model.safetensors`, `runs/b/model.safetensors`) need different cache folders,
    or the second raises ChecksumError on the first's file.
    """
    import yaml

    with open(path) as f:
        entries: Dict[str, Any] = yaml.safe_load(f) or {}
    fields = set(ModelSpec.__dataclass_fields__) - {"name"}
    for name, entry in entries.items():
        unknown = sorted(set(entry) - fields)
        if unknown:
            raise ValueError(f"{path}: model {name!r} has unknown field(s) {unknown}; valid: {sorted(fields)}")
        for field in ("decoders", "render_modes"):
            if field in entry:
                entry = {**entry, field: tuple(entry[field])}
        register_model(ModelSpec(name=name, **entry), overwrite=True)


if os.environ.get("SHAP_E_REGISTRY"):
    register_from_file(os.environ["SHAP_E_REGISTRY"])
