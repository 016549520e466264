"""samples/make_roundtrips.py: the README's round-trip GIFs, made with the bundled transmitter-small."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest
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


def test_a_failed_round_trip_leaves_the_folder_as_it_was(tmp_path, capsys):
    script = load_script()
    (tmp_path / "red_mushroom.gif").write_bytes(b"the old picture")
    assert script.main(["--out", str(tmp_path), "--model", "no-such-model", "--device", "cpu"]) == 2
    assert "shap-e encode failed for red_mushroom" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["red_mushroom.gif"]
    assert (tmp_path / "red_mushroom.gif").read_bytes() == b"the old picture"


def test_a_size_or_view_count_below_one_is_refused_naming_the_option(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_script().main(["--out", str(tmp_path / "gifs"), "--views", "0"])
    assert exit_info.value.code == 2 and "--size and --views must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "gifs").exists()
