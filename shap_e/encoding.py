"""`shap_e.encode(path)`: a 3D asset file -> its Shap-E latent, without Blender."""
from pathlib import Path
from typing import Optional, Union

import torch

from shap_e.models.configs import resolve_device


def encode(
    path: Union[str, Path],
    transmitter: Optional[torch.nn.Module] = None,
    device: Optional[Union[str, torch.device]] = None,
    generator: Optional[torch.Generator] = None,
    cache_dir: Optional[str] = None,
    seed: int = 0,
) -> torch.Tensor:
    """Encode one asset (OBJ, PLY, STL, OFF, GLB/glTF) to a `[latent_ctx * d_latent]` latent in (-1, 1).

    :param transmitter: a loaded transmitter; default: `load_model("transmitter")` (official weights).
    :param generator: the encoder's random draws (its point-convolution shuffles); default: global RNG.
    :param cache_dir: where to cache the point cloud and multiview renders of the asset.
    :param seed: seeds the surface sampling of the point cloud.
    """
    from shap_e.util.data_util import load_or_create_multimodal_batch

    device = resolve_device(device) or torch.device("cpu")
    if not Path(path).is_file():
        raise FileNotFoundError(f"path={str(path)!r} does not exist or is not a file")
    if transmitter is None:
        from shap_e.models.download import load_model

        transmitter = load_model("transmitter", device=device)
    encoder = transmitter.encoder
    batch = load_or_create_multimodal_batch(
        device,
        model_path=str(path),
        cache_dir=cache_dir,
        seed=seed,
        **encoder.batch_options(),
    )
    with torch.inference_mode():
        return encoder.encode_to_bottleneck(batch, generator)[0]
