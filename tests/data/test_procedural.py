"""Procedural dataset: geometry, colours, determinism, splits and files."""
import json

import numpy as np
import pytest
import trimesh

from shap_e.data import (
    CATEGORIES,
    COLOURS,
    HELDOUT_PAIRS,
    MULTI_PART,
    PROPORTIONS,
    allowed_pairs,
    generate_asset,
    iter_dataset,
    read_captions,
    write_dataset,
)
from shap_e.data.captions import COLOUR_SYNONYMS
from shap_e.data.shapes import build_parts

REQUIRED_CATEGORIES = {"cube", "sphere", "cylinder", "cone", "torus", "pyramid", "capsule", "table", "chair",
                       "mushroom", "lamp", "snowman"}
REQUIRED_COLOURS = {"red", "green", "blue", "yellow", "orange", "purple", "pink", "white", "black", "brown",
                    "gray", "cyan"}


def test_required_categories_colours_and_proportions_exist():
    assert REQUIRED_CATEGORIES <= set(CATEGORIES)
    assert REQUIRED_COLOURS <= set(COLOURS) == set(COLOUR_SYNONYMS)
    assert {"tall", "flat", "wide", "small"} <= set(PROPORTIONS)


@pytest.mark.parametrize("category", CATEGORIES)
def test_every_part_is_closed_with_outward_normals(category):
    for part in build_parts(category, np.random.default_rng(0)):
        mesh = trimesh.Trimesh(part.vertices, part.faces, process=False)
        assert mesh.is_watertight and mesh.is_winding_consistent, category
        assert mesh.volume > 0, f"{category}: inward winding"


@pytest.mark.parametrize("proportion", list(PROPORTIONS))
def test_assets_are_centred_with_largest_extent_one_and_small_half(proportion):
    for category in ("cube", "chair", "snowman"):
        low, high = generate_asset(category, "red", proportion, seed=5).mesh.bounds
        np.testing.assert_allclose((low + high) / 2, 0.0, atol=1e-12)
        assert (high - low).max() == pytest.approx(0.5 if proportion == "small" else 1.0)


def test_proportions_change_the_shape_as_named():
    def extents(proportion):
        return np.ptp(generate_asset("cylinder", "blue", proportion, seed=1).mesh.vertices, axis=0)

    regular, tall, flat = extents("regular"), extents("tall"), extents("flat")
    assert tall[2] / tall[:2].max() > 1.5 * regular[2] / regular[:2].max()
    assert flat[2] / flat[:2].max() < 0.6 * regular[2] / regular[:2].max()
    wide = generate_asset("cube", "blue", "wide", seed=1).mesh.vertices
    assert np.ptp(wide[:, :2], axis=0).max() > 1.3 * np.ptp(wide[:, 2])


def test_vertex_colours_are_the_named_srgb_colours():
    asset = generate_asset("table", "brown", "regular", seed=0, secondary_colour="black")
    rgba = asset.mesh.visual.vertex_colors
    assert rgba.dtype == np.uint8 and rgba.shape == (len(asset.mesh.vertices), 4)
    found = {tuple(c) for c in rgba.tolist()}
    assert found == {COLOURS["brown"] + (255,), COLOURS["black"] + (255,)}
    assert asset.colours == ("brown", "black")
    assert generate_asset("sphere", "cyan", seed=0).colours == ("cyan",)


def test_same_seed_gives_the_same_asset_and_other_seeds_differ():
    a, b = generate_asset("mushroom", "red", "tall", seed=7), generate_asset("mushroom", "red", "tall", seed=7)
    assert a.caption == b.caption and a.colours == b.colours
    np.testing.assert_array_equal(a.mesh.vertices, b.mesh.vertices)
    c = generate_asset("mushroom", "red", "tall", seed=8)
    assert not np.array_equal(a.mesh.vertices, c.mesh.vertices)


def test_caption_vocabulary_does_not_change_the_geometry():
    train = generate_asset("lamp", "pink", "wide", seed=3)
    heldout = generate_asset("lamp", "pink", "wide", seed=3, paraphrase_set="heldout")
    np.testing.assert_array_equal(train.mesh.vertices, heldout.mesh.vertices)
    assert train.colours == heldout.colours and train.caption != heldout.caption


def test_objects_are_in_canonical_pose_unless_random_yaw_turns_them_about_z():
    canonical = generate_asset("cube", "red", "wide", seed=5)
    turned = generate_asset("cube", "red", "wide", seed=5, random_yaw=True)
    for axis in range(3):  # an unturned box: two distinct coordinates per axis
        assert len(np.unique(canonical.mesh.vertices[:, axis].round(6))) == 2
    assert turned.caption == canonical.caption and turned.colours == canonical.colours
    a = canonical.mesh.vertices - canonical.mesh.vertices.mean(axis=0)
    b = turned.mesh.vertices - turned.mesh.vertices.mean(axis=0)
    scale = np.linalg.norm(b) / np.linalg.norm(a)  # normalising the turned bbox rescales it
    np.testing.assert_allclose(b[:, 2], scale * a[:, 2], atol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(b[:, :2], axis=1), scale * np.linalg.norm(a[:, :2], axis=1), atol=1e-9)
    assert np.abs(b[:, :2] - scale * a[:, :2]).max() > 0.05
    first = next(iter_dataset("train", 1, 0, random_yaw=True))
    assert first.caption == next(iter_dataset("train", 1, 0)).caption


def test_heldout_pairs_cover_each_category_and_colour_once():
    assert len(HELDOUT_PAIRS) == 12 == len(set(HELDOUT_PAIRS))
    assert sorted(c for c, _ in HELDOUT_PAIRS) == sorted(CATEGORIES)
    assert sorted(c for _, c in HELDOUT_PAIRS) == sorted(COLOURS)
    train = allowed_pairs("train")
    assert not set(train) & set(HELDOUT_PAIRS)
    for category in CATEGORIES:  # still trained with every other colour
        assert sum(cat == category for cat, _ in train) == len(COLOURS) - 1
    for colour in COLOURS:
        assert sum(col == colour for _, col in train) == len(CATEGORIES) - 1


def test_train_split_never_shows_a_heldout_pair_even_as_second_colour():
    held = set(HELDOUT_PAIRS)
    assets = list(iter_dataset("train", 150, seed=0))
    assert not any((a.category, c) in held for a in assets for c in a.colours)
    assert {a.category for a in assets} == set(CATEGORIES)
    assert any(len(set(a.colours)) == 2 for a in assets if a.category in MULTI_PART)


def test_heldout_pairs_split_yields_only_heldout_pairs():
    for asset in iter_dataset("heldout_pairs", 24, seed=0):
        assert (asset.category, asset.colours[0]) in HELDOUT_PAIRS


def test_asset_i_does_not_depend_on_n():
    short = [a.caption for a in iter_dataset("train", 3, seed=4)]
    long = [a.caption for a in iter_dataset("train", 6, seed=4)]
    assert short == long[:3]
    assert short != [a.caption for a in iter_dataset("train", 3, seed=5)]


def test_write_dataset_is_byte_identical_for_the_same_seed(tmp_path):
    first = write_dataset(tmp_path / "a", n=5, seed=11)
    second = write_dataset(tmp_path / "b", n=5, seed=11)
    names = sorted(p.name for p in first.parent.iterdir())
    assert names == sorted(p.name for p in second.parent.iterdir())
    assert len(names) == 6 and not any(n.endswith(".tmp") for n in names)
    for name in names:
        assert (first.parent / name).read_bytes() == (second.parent / name).read_bytes(), name
    other = write_dataset(tmp_path / "c", n=5, seed=12)
    assert other.read_bytes() != first.read_bytes()


def test_written_ply_and_captions_round_trip(tmp_path):
    write_dataset(tmp_path, n=3, seed=2, split="heldout_pairs")
    records = read_captions(tmp_path)
    expected = list(iter_dataset("heldout_pairs", 3, seed=2))
    assert [r["caption"] for r in records] == [a.caption for a in expected]
    for record, asset in zip(records, expected):
        loaded = trimesh.load(tmp_path / record["file"], process=False)
        np.testing.assert_allclose(loaded.vertices, asset.mesh.vertices, atol=1e-6)
        np.testing.assert_array_equal(loaded.faces, asset.mesh.faces)
        np.testing.assert_array_equal(loaded.visual.vertex_colors, asset.mesh.visual.vertex_colors)
        assert record["colours"] == list(asset.colours) and record["split"] == "heldout_pairs"
    json.loads((tmp_path / "captions.jsonl").read_text().splitlines()[0])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(category="teapot", colour="red"), "category"),
        (dict(category="cube", colour="mauve"), "colour"),
        (dict(category="cube", colour="red", proportion="huge"), "proportion"),
        (dict(category="cube", colour="red", seed=-1), "seed"),
        (dict(category="cube", colour="red", secondary_colour="blue"), "secondary_colour"),
        (dict(category="table", colour="red", secondary_colour="teal"), "secondary_colour"),
        (dict(category="cube", colour="red", paraphrase_set="test"), "paraphrase_set"),
    ],
)
def test_bad_arguments_raise_value_errors_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        generate_asset(**kwargs)


def test_unknown_split_and_missing_captions_are_reported(tmp_path):
    with pytest.raises(ValueError, match="split"):
        list(iter_dataset("validation", 1))
    with pytest.raises(FileNotFoundError, match="write_dataset"):
        read_captions(tmp_path)
