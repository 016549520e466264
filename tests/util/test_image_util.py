"""`shap_e.util.image_util`: what each official image helper computes."""
import numpy as np
import pytest
import torch
from PIL import Image

from shap_e.util.image_util import center_crop, get_alpha, load_image, make_tile, remove_alpha, resize, round_up


def _rgba(alpha: np.ndarray, rgb=(200, 100, 50)) -> Image.Image:
    pixels = np.zeros(alpha.shape + (4,), np.uint8)
    pixels[..., :3], pixels[..., 3] = rgb, alpha
    return Image.fromarray(pixels)


def test_load_image_returns_the_file_as_stored_without_conversion(tmp_path):
    for mode, pixels in [("RGBA", np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)),
                         ("L", np.arange(6, dtype=np.uint8).reshape(2, 3))]:
        Image.fromarray(pixels).save(tmp_path / f"{mode}.png")
        image = load_image(str(tmp_path / f"{mode}.png"))
        assert image.mode == mode and np.array_equal(np.asarray(image), pixels)
    palette = Image.new("P", (4, 4), 3)
    palette.save(tmp_path / "p.png")
    assert load_image(str(tmp_path / "p.png")).mode == "P"


def test_center_crop_takes_the_central_square_of_every_image_type():
    pixels = np.arange(5 * 8, dtype=np.uint8).reshape(5, 8)  # height 5, width 8: columns 1..5
    expected = pixels[:, 1:6]
    assert np.array_equal(center_crop(pixels), expected)
    assert torch.equal(center_crop(torch.from_numpy(pixels)), torch.from_numpy(expected))
    assert np.array_equal(np.asarray(center_crop(Image.fromarray(pixels))), expected)
    tall = np.zeros((9, 4, 3))
    assert center_crop(tall).shape == (4, 4, 3)


def test_resize_averages_areas_and_keeps_the_type_and_dtype():
    pixels = np.array([[0, 2, 4, 6], [2, 4, 6, 9]], dtype=np.uint8)
    out = resize(pixels, height=1, width=2)
    assert out.dtype == np.uint8 and out.tolist() == [[2, 6]]  # 6.25 truncates to 6, like the official cast
    rgb = np.stack([pixels] * 3, axis=-1)
    assert resize(Image.fromarray(rgb), height=1, width=2).size == (2, 1)
    floats = torch.tensor([[[0.0], [4.0]], [[8.0], [12.0]]])
    assert torch.equal(resize(floats, height=1, width=1, min_value=0, max_value=5), torch.tensor([[[5.0]]]))


def test_get_alpha_returns_the_alpha_band_or_opaque():
    alpha = np.array([[0, 128], [255, 7]], dtype=np.uint8)
    assert np.array_equal(np.asarray(get_alpha(_rgba(alpha))), alpha)
    opaque = get_alpha(Image.new("RGB", (3, 2)))
    assert opaque.mode == "L" and np.asarray(opaque).tolist() == [[255] * 3] * 2


def test_remove_alpha_blends_over_black_or_white_and_leaves_opaque_images_alone():
    alpha = np.array([[0, 255, 51]], dtype=np.uint8)
    black = np.asarray(remove_alpha(_rgba(alpha), "black"))
    white = np.asarray(remove_alpha(_rgba(alpha), "white"))
    assert black[0, 0].tolist() == [0, 0, 0] and black[0, 1].tolist() == [200, 100, 50]
    assert black[0, 2].tolist() == [40, 20, 10]  # 0.2 of the colour
    assert white[0, 2].tolist() == [244, 224, 214]
    rgb = Image.new("RGB", (2, 2), (1, 2, 3))
    assert remove_alpha(rgb) is rgb
    with pytest.raises(ValueError, match="mode='grey'"):
        remove_alpha(_rgba(alpha), "grey")


def test_random_background_keeps_opaque_pixels_and_repeats_per_seed():
    alpha = np.zeros((16, 16), np.uint8)
    alpha[4:12, 4:12] = 255
    image = _rgba(alpha)
    outs = [np.asarray(remove_alpha(image, rng=np.random.default_rng(s))) for s in (1, 1, 2)]
    assert all(out.shape == (16, 16, 3) for out in outs)
    assert all((out[4:12, 4:12] == [200, 100, 50]).all() for out in outs)
    assert np.array_equal(outs[0], outs[1])
    backgrounds = {np.asarray(remove_alpha(image, rng=np.random.default_rng(s)))[0:4].tobytes() for s in range(12)}
    assert len(backgrounds) > 3  # several kinds and parameters of background


def test_make_tile_lays_out_rows_and_pads_with_black():
    images = [np.full((2, 3, 3), 10 * (k + 1), np.uint8) for k in range(5)]
    tile = np.asarray(make_tile(images, columns=2))
    assert tile.shape == (6, 6, 3)
    assert tile[0, 0, 0] == 10 and tile[0, 3, 0] == 20 and tile[2, 0, 0] == 30 and tile[4, 0, 0] == 50
    assert (tile[4:, 3:] == 0).all()
    assert np.asarray(make_tile([Image.fromarray(images[0])], columns=8)).shape == (2, 24, 3)
    with pytest.raises(ValueError, match=r"images\[1\]"):
        make_tile([images[0], np.zeros((3, 3, 3), np.uint8)])


def test_round_up_gives_the_next_multiple():
    assert [round_up(n, 8) for n in (0, 1, 8, 9, 16)] == [0, 8, 8, 16, 16]
