"""What an evaluation run is asked to do: `EvalSettings` (how it samples, decodes and measures) and
`Judges` (the category classifiers that judge each mesh).

Every setting is validated when the dataclass is made, before any model or classifier is built, and
the settings that apply to a task are recorded in its result (`EvalSettings.record`).
"""
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Dict, Mapping, Optional

from shap_e.eval.classify import ShapeClassifier, build_classifier

__all__ = ["DEFAULT_GUIDANCE", "EvalSettings", "Judges", "TASK_SETTINGS"]

# Classifier-free guidance when none is given: the official text and image models' values.
DEFAULT_GUIDANCE = {"text_to_3d": 15.0, "image_to_3d": 3.0}

_SAMPLING = ("guidance_scale", "guidance_max_sigma", "steps", "sampler", "batch_size", "grid_size",
             "vertex_placement", "seed")
# The settings each task uses, in the order its result records them.
TASK_SETTINGS = {
    "reconstruction": ("grid_size", "resolution", "n_samples", "seed", "refine_steps", "vertex_placement"),
    "text_to_3d": _SAMPLING,
    "image_to_3d": _SAMPLING + ("init_strength", "resolution"),
    "ground_truth": (),
}


@dataclass(frozen=True)
class EvalSettings:
    """How an evaluation samples, decodes and measures.

    guidance_scale: classifier-free guidance; None: the task's `DEFAULT_GUIDANCE`.
    guidance_max_sigma: guide only the sampler steps with sigma <= this (None: every step), as in `sample_latents`.
    steps, sampler: Karras sampler steps and name (a key of `shap_e.diffusion.SAMPLERS`).
    batch_size: latents sampled at once.
    init_strength: image priors with a latent head start from the latent they regress off the picture,
        at this SDEdit strength in (0, 1]; 1 samples from noise.
    grid_size, vertex_placement: marching cubes of the decoded meshes (`decode_latent_mesh`);
        "reference" shrinks a mesh by (G - 1) / (G + 1), which alone caps the IoU near 0.91 at G = 64.
    resolution: the IoU grid.
    n_samples: surface samples for the Chamfer distance and colour error (reconstruction).
    refine_steps: `shap_e.encode`'s latent refinement against the asset (reconstruction; 0: encoder alone).
    seed: item i of a run samples with seed + i.
    """

    guidance_scale: Optional[float] = None
    guidance_max_sigma: Optional[float] = None
    steps: int = 64
    sampler: str = "heun"
    batch_size: int = 8
    init_strength: float = 1.0
    grid_size: int = 64
    vertex_placement: str = "reference"
    resolution: int = 64
    n_samples: int = 10000
    refine_steps: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        from shap_e.diffusion import SAMPLERS
        from shap_e.diffusion.presets import check_guidance_max_sigma
        from shap_e.diffusion.sample import check_strength
        from shap_e.rendering.stf import VERTEX_PLACEMENTS

        for name, least in (("steps", 2), ("batch_size", 1), ("grid_size", 8), ("resolution", 8), ("n_samples", 1),
                            ("refine_steps", 0)):
            if getattr(self, name) < least:
                raise ValueError(f"{name} must be at least {least}, got {getattr(self, name)}")
        check_guidance_max_sigma(self.guidance_max_sigma)
        check_strength(self.init_strength, "init_strength")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler={self.sampler!r} is unknown; use one of {sorted(SAMPLERS)}")
        if self.vertex_placement not in VERTEX_PLACEMENTS:
            raise ValueError(f"vertex_placement={self.vertex_placement!r} is unknown; use one of {VERTEX_PLACEMENTS}")

    def for_task(self, task: str) -> "EvalSettings":
        """These settings with the task's default guidance filled in."""
        if self.guidance_scale is None and task in DEFAULT_GUIDANCE:
            return replace(self, guidance_scale=DEFAULT_GUIDANCE[task])
        return self

    def record(self, task: str) -> Dict[str, Any]:
        """The settings `task` uses, by name, for its result file."""
        values = asdict(self.for_task(task))
        return {name: values[name] for name in TASK_SETTINGS[task]}


@dataclass
class Judges:
    """The category classifiers that judge each mesh.

    main: writes `pred_category` / `category_correct` (None: `build_classifier()`, built when first needed).
    extra: more judges of the same meshes, by name (e.g. `{"decoded": ...}` for references decoded by a
        transmitter); each adds `pred_category_<name>` and `category_correct_<name>` to the rows and
        `category_correct_<name>` to the summary, so one set of samples is scored against several references.
    """

    main: Optional[ShapeClassifier] = None
    extra: Mapping[str, ShapeClassifier] = field(default_factory=dict)

    def built(self) -> "Judges":
        """These judges with the default main classifier built if none was given."""
        return self if self.main is not None else Judges(build_classifier(), self.extra)
