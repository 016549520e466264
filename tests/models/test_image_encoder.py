"""The from-scratch grid image encoder: output layout, input handling, the conditioning interface."""
import numpy as np
import pytest
import torch
from PIL import Image

from shap_e.models.conditioning import ImageGridConditioner
from shap_e.models.image_encoder import ImageGridEncoder, images_to_pixels


@pytest.fixture(scope="module")
def encoder():
    torch.manual_seed(0)
    return ImageGridEncoder(image_size=32, patch_size=8, width=32, layers=1, heads=2).eval()


def test_grid_is_channel_major_with_one_token_per_patch(encoder):
    out = encoder(torch.rand(2, 3, 32, 32) * 2 - 1)
    assert encoder.grid_shape == (32, 16)
    assert out.shape == (2, 32, 16) and out.dtype == torch.float32


def test_encoder_satisfies_image_grid_conditioner_protocol(encoder):
    assert isinstance(encoder, ImageGridConditioner)


def test_tokens_are_row_major_patches(encoder):
    # Without transformer blocks, changing one 8x8 patch changes its own token most (GroupNorm and the
    # 3x3 convolutions spread a little to the others).
    torch.manual_seed(0)
    local = ImageGridEncoder(image_size=32, patch_size=8, width=32, layers=0, heads=2).eval()
    pixels = torch.zeros(1, 3, 32, 32)
    bumped = pixels.clone()
    bumped[:, :, 8:16, 24:32] = 1.0  # patch row 1, column 3 -> token 1 * 4 + 3
    with torch.no_grad():
        change = (local(bumped) - local(pixels)).abs().mean(dim=1)[0]  # [n_tokens]
    assert change.argmax().item() == 7


def test_gradients_reach_every_parameter(encoder):
    encoder.zero_grad()
    encoder(torch.rand(2, 3, 32, 32)).square().mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in encoder.parameters())


def test_pil_uint8_and_tensor_inputs_agree(encoder):
    rgb = np.random.default_rng(0).integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
    as_tensor = torch.from_numpy(rgb).permute(2, 0, 1)[None].float() / 127.5 - 1
    with torch.no_grad():
        grids = [encoder.embed_images_grid(x) for x in ([Image.fromarray(rgb)], [rgb], as_tensor)]
    torch.testing.assert_close(grids[0], grids[2])
    torch.testing.assert_close(grids[1], grids[2])


def test_images_are_centre_cropped_resized_and_none_is_black():
    wide = np.zeros((64, 128, 3), dtype=np.uint8)
    wide[:, 32:96] = 255  # exactly the central square is white
    pixels = images_to_pixels([wide, None], 32)
    assert pixels.shape == (2, 3, 32, 32)
    torch.testing.assert_close(pixels[0], torch.ones(3, 32, 32))
    torch.testing.assert_close(pixels[1], -torch.ones(3, 32, 32))


def test_bad_shapes_raise_value_errors(encoder):
    with pytest.raises(ValueError, match="pixels must be"):
        encoder(torch.zeros(1, 3, 16, 16))
    with pytest.raises(ValueError, match="uint8"):
        images_to_pixels([np.zeros((8, 8, 3), dtype=np.float32)], 32)
    with pytest.raises(ValueError, match="patch_size"):
        ImageGridEncoder(patch_size=6)
