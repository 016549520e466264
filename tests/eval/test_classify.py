"""The ground-truth classifier: colour names, yaw invariance and accuracy on held-out assets."""
import math

import pytest
import torch
import torch.nn.functional as F
import trimesh

from shap_e.data import COLOURS, iter_dataset
from shap_e.eval.classify import (
    build_classifier,
    canonical_grid,
    color_name,
    connected_parts,
    dominant_color,
    drop_small_parts,
    srgb_to_lab,
)
from shap_e.eval.metrics import face_colored_mesh, grid_iou, nearest, occupancy, to_eval_mesh
from shap_e.eval.judge import asset_mesh
from shap_e.rendering.marching_cubes import marching_cubes
from shap_e.rendering.torch_mesh import TorchMesh
from shap_e.rendering.color import srgb_to_linear


@pytest.fixture(scope="module")
def classifier():
    return build_classifier(per_proportion=2, resolution=32)


def remeshed(mesh: TorchMesh, grid: int, generator: torch.Generator) -> TorchMesh:
    """What a decoder might return: a smoothed marching-cubes surface of the shape with linear vertex
    colours dimmed or brightened (up to -40 % / +10 %) and noisy."""
    field = F.avg_pool3d(occupancy(mesh, grid).float()[None, None], 3, 1, 1)[0, 0] - 0.5
    field = F.pad(field, (1,) * 6, value=-0.5)  # closed surface, as the decoder pads its grid
    step = 2 / grid
    out = marching_cubes(field, -1 - step / 2, 2 + step)
    _, face = nearest(out.verts, mesh.verts[mesh.faces].mean(dim=1))
    gain = 0.6 + 0.5 * torch.rand(1, generator=generator)
    colors = (mesh.face_colors()[face] * gain + 0.03 * torch.randn(len(face), 3, generator=generator)).clamp(0, 1)
    return TorchMesh(out.verts, out.faces, {c: colors[:, i] for i, c in enumerate("RGB")})


def test_srgb_to_lab_of_white_and_black():
    lab = srgb_to_lab(torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    assert torch.allclose(lab, torch.tensor([[100.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), atol=0.05)


def test_every_palette_colour_is_named_as_itself():
    srgb = torch.tensor(list(COLOURS.values()), dtype=torch.float32) / 255
    assert color_name(srgb) == list(COLOURS)


def test_lighting_free_vertex_colours_keep_their_name():
    # Decoded meshes carry albedo-like linear colours: scaled by up to +-20 % and noisy, not shaded.
    g = torch.Generator().manual_seed(0)
    linear = srgb_to_linear(torch.tensor(list(COLOURS.values()), dtype=torch.float32) / 255)
    for _ in range(10):
        varied = linear * (0.8 + 0.4 * torch.rand(len(linear), 1, generator=g))
        varied = varied + 0.02 * torch.randn(varied.shape, generator=g)
        triangle = torch.eye(3), torch.tensor([[0, 1, 2]])
        names = [dominant_color(face_colored_mesh(*triangle, c[None].clamp(0, 1)))[0] for c in varied]
        assert names == list(COLOURS)


def test_dominant_colour_is_the_largest_area_not_the_mean():
    verts = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [0.3, 0, 1], [0, 0.3, 1]])
    faces = torch.tensor([[0, 1, 2], [3, 4, 5]])
    red, blue = (srgb_to_linear(torch.tensor(COLOURS[c], dtype=torch.float32) / 255) for c in ("red", "blue"))
    name, share = dominant_color(face_colored_mesh(verts, faces, torch.stack([red, blue])))
    assert name == "red" and share == pytest.approx(1 / 1.09, abs=1e-4)
    assert dominant_color(TorchMesh(verts, faces)) == (None, 0.0)


def test_horizontal_faces_outweigh_vertical_ones_of_equal_area():
    # A table top (horizontal) and its legs (vertical): legs with 1.5x the area still lose.
    verts = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 0], [0, 1.5, 0], [0, 0, 1]])
    faces = torch.tensor([[0, 1, 2], [3, 4, 5]])
    top, legs = (srgb_to_linear(torch.tensor(COLOURS[c], dtype=torch.float32) / 255) for c in ("orange", "blue"))
    name, share = dominant_color(face_colored_mesh(verts, faces, torch.stack([top, legs])))
    assert name == "orange" and share == pytest.approx(0.5 / (0.5 + 0.75 / 2))


def test_canonical_grid_ignores_the_yaw():
    mesh = asset_mesh(next(iter(iter_dataset("train", 1, seed=5))))
    base = canonical_grid(mesh, 32)
    for angle in (0.3, 1.2, 2.5):
        c, s = math.cos(angle), math.sin(angle)
        turned = TorchMesh(mesh.verts @ torch.tensor([[c, -s, 0], [s, c, 0], [0, 0, 1.0]]).T, mesh.faces)
        grid = canonical_grid(turned, 32)
        best = max(grid_iou(g, base) for g in (grid, grid.flip(0), grid.flip(1), grid.flip(0).flip(1),
                                              grid.transpose(0, 1), grid.transpose(0, 1).flip(0),
                                              grid.transpose(0, 1).flip(1), grid.transpose(0, 1).flip(0).flip(1)))
        assert best > 0.95


@pytest.mark.parametrize("split", ["heldout_pairs", "heldout_paraphrases"])
def test_classifier_is_accurate_on_ground_truth_heldout_assets(classifier, split):
    # Measured: 1.00 category and 1.00 colour on 600 assets of each split (R = 32, 120 references).
    assets = list(iter_dataset(split, 60, seed=1))
    category = sum(classifier.classify(asset_mesh(a))[0] == a.category for a in assets) / len(assets)
    colour = sum(dominant_color(asset_mesh(a))[0] == a.colours[0] for a in assets) / len(assets)
    assert category >= 0.95 and colour >= 0.98


def test_classifier_survives_a_decoder_like_remeshing(classifier):
    # Measured: 0.99 category, 1.00 colour on 120 assets (marching cubes on a smoothed 64^3 grid).
    g = torch.Generator().manual_seed(0)
    assets = list(iter_dataset("heldout_pairs", 24, seed=2))
    meshes = [remeshed(asset_mesh(a), 48, g) for a in assets]
    category = sum(classifier.classify(m)[0] == a.category for m, a in zip(meshes, assets)) / len(assets)
    colour = sum(dominant_color(m)[0] == a.colours[0] for m, a in zip(meshes, assets)) / len(assets)
    assert category >= 0.9 and colour >= 0.9


def test_connected_parts_label_faces_that_share_vertices():
    faces = torch.tensor([[0, 1, 2], [5, 6, 7], [2, 3, 4], [7, 8, 9], [4, 10, 11]])
    part = connected_parts(faces, 12)
    assert part[0] == part[2] == part[4] and part[1] == part[3] and part[0] != part[1]


def test_small_parts_are_dropped_and_large_ones_kept():
    body = trimesh.creation.box(extents=(1.0, 1.0, 1.0))
    speck = trimesh.creation.icosphere(subdivisions=1, radius=0.05).apply_translation((0.9, 0.9, 0.9))
    mesh = to_eval_mesh(trimesh.util.concatenate([body, speck]))
    kept = drop_small_parts(mesh)
    assert kept.faces.shape[0] == len(body.faces)
    assert drop_small_parts(mesh, min_fraction=0.0).faces.shape[0] == mesh.faces.shape[0]


def test_classifier_ignores_a_stray_speck(classifier):
    # Measured: 1.00 on 120 held-out assets each with a 0.04-radius speck somewhere in the box.
    g = torch.Generator().manual_seed(0)
    speck = trimesh.creation.icosphere(subdivisions=1, radius=0.04)
    assets = list(iter_dataset("heldout_pairs", 24, seed=3))
    correct = 0
    for asset in assets:
        mesh = asset_mesh(asset)
        where = (torch.rand(3, generator=g) * 1.8 - 0.9).tolist()
        extra = to_eval_mesh(speck.copy().apply_translation(where))
        joined = TorchMesh(torch.cat([mesh.verts, extra.verts]), torch.cat([mesh.faces, extra.faces + len(mesh.verts)]))
        correct += classifier.classify(joined)[0] == asset.category
    assert correct / len(assets) >= 0.95


def test_classifier_scores_every_category_and_rejects_bad_settings(classifier):
    scores = classifier.scores(asset_mesh(next(iter(iter_dataset("train", 1)))))
    assert len(scores) == 12 and all(0.0 <= v <= 1.0 for v in scores.values())
    with pytest.raises(ValueError, match="per_proportion"):
        build_classifier(per_proportion=0)
    with pytest.raises(ValueError, match="unknown category"):
        build_classifier(categories=["teapot"])


def test_decoded_references_join_the_ground_truth_ones_and_name_decoded_meshes():
    from shap_e.data import allowed_pairs, generate_asset
    from shap_e.eval.classify import _reconstruct
    from shap_e.models.download import load_model

    xm = load_model("transmitter-small").eval()
    plain = build_classifier(per_proportion=1, categories=["cube", "cylinder"])
    both = build_classifier(per_proportion=1, categories=["cube", "cylinder"], transmitter=xm, grid_size=32)
    assert both.labels == [label for label in plain.labels for _ in range(2)]
    torch.testing.assert_close(both.grids[0::2], plain.grids)  # ground truth first, then its reconstruction
    assert not torch.equal(both.grids[1::2], plain.grids)
    # A reference's own reconstruction (same seed) is its nearest neighbour, exactly.
    colour = next(c for category, c in allowed_pairs("train") if category == "cube")  # as the classifier draws it
    tall_box = generate_asset("cube", colour, "tall", 0)
    label, score = both.classify(_reconstruct(tall_box.mesh, xm, 32, "reference", 0))
    assert (label, score) == ("cube", 1.0)
