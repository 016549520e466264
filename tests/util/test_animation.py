"""Turntable GIFs: one shared palette, no dithering, every frame kept close to its colours."""
import io

import numpy as np
from PIL import Image, ImageSequence

from shap_e.util.animation import gif_bytes


def _turntable(n: int = 12, size: int = 64):
    """Frames of a shaded disc moving across a white background (smooth gradients, like a render)."""
    y, x = np.mgrid[0:size, 0:size] / size
    frames = []
    for i in range(n):
        cx = 0.3 + 0.4 * i / n
        inside = (x - cx) ** 2 + (y - 0.5) ** 2 < 0.08
        shade = np.clip(1.2 - 2 * np.hypot(x - cx + 0.1, y - 0.4), 0, 1)
        rgb = np.where(inside[..., None], np.stack([shade * 220, shade * 60, shade * 40], -1), 255)
        frames.append(Image.fromarray(rgb.astype(np.uint8)))
    return frames


def test_every_frame_shares_one_palette_and_keeps_its_colours():
    frames = _turntable()
    gif = Image.open(io.BytesIO(gif_bytes(frames)))
    decoded = [f.convert("RGB") for f in ImageSequence.Iterator(gif)]
    assert len(decoded) == len(frames)
    colours = {tuple(c) for f in decoded for c in np.asarray(f).reshape(-1, 3)}
    assert len(colours) <= 256  # one palette for the whole animation
    for original, shown in zip(frames, decoded):
        error = np.abs(np.asarray(original, dtype=int) - np.asarray(shown, dtype=int))
        assert error.mean() < 2 and error.max() < 24


def test_undithered_frames_make_a_smaller_file_than_per_frame_dithered_ones():
    frames = _turntable(20, 128)
    dithered = io.BytesIO()
    frames[0].save(dithered, format="GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    assert len(gif_bytes(frames)) < 0.8 * len(dithered.getvalue())
