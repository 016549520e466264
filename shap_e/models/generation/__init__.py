"""The latent diffusion models (the "prior"): transformers over latent tokens, conditioned on text or
images, and the `SplitVectorDiffusion` wrapper that maps flat latents to and from them."""
from shap_e.models.generation.latent_diffusion import SplitVectorDiffusion
from shap_e.models.generation.transformer import (
    CONDITIONERS,
    CLIPImageGridPointDiffusionTransformer,
    CLIPImagePointDiffusionTransformer,
    ImageGridConditionedTransformer,
    PointDiffusionTransformer,
    TextConditionedTransformer,
)

__all__ = [
    "CLIPImageGridPointDiffusionTransformer",
    "CLIPImagePointDiffusionTransformer",
    "CONDITIONERS",
    "ImageGridConditionedTransformer",
    "PointDiffusionTransformer",
    "SplitVectorDiffusion",
    "TextConditionedTransformer",
]
