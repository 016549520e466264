"""samples/make_roundtrips.py: the README's round-trip GIFs, made with the bundled transmitter-small."""
import importlib.util
from pathlib import Path

import numpy as np
from PIL import Image

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def load_script():
    spec = importlib.util.spec_from_file_location("make_roundtrips", SAMPLES / "make_roundtrips.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_round_trips_write_one_turntable_per_object_in_its_colour(tmp_path):
    script = load_script()
    assert script.main(["--out", str(tmp_path), "--size", "24", "--views", "2", "--device", "cpu"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{c}_{k}.gif" for k, c in script.OBJECTS)
    for category, colour in (("mushroom", "red"), ("torus", "green")):
        gif = Image.open(tmp_path / f"{colour}_{category}.gif")
        assert gif.n_frames == 2 and gif.size == (24, 24)
        rgb = np.asarray(gif.convert("RGB"), dtype=float).reshape(-1, 3)
        shown = rgb[np.abs(rgb - rgb[0]).sum(axis=1) > 30]  # the object's pixels, not the corner's background
        red, green, blue = shown.mean(axis=0)
        if colour == "red":
            assert red > green + 40 and red > blue + 40, (red, green, blue)
        else:
            assert green > red + 20 and green > blue + 20, (red, green, blue)
