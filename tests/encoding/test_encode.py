"""`shap_e.encode(path)` encodes an asset file end to end (small transmitter, random weights)."""
import pytest
import torch
import trimesh

import shap_e
from shap_e.models.configs import model_from_config


@pytest.fixture(scope="module")
def small_transmitter(golden):
    e = golden("e")
    model = model_from_config(e["config"]).eval()
    model.load_state_dict(e["state_dict"])
    return model


def test_encode_from_a_file_gives_a_bounded_reproducible_latent(tmp_path, small_transmitter):
    path = tmp_path / "box.ply"
    trimesh.creation.box(extents=(1.0, 0.5, 0.3)).export(path)
    enc = small_transmitter.encoder
    a = shap_e.encode(path, small_transmitter, generator=torch.Generator().manual_seed(0))
    b = shap_e.encode(path, small_transmitter, generator=torch.Generator().manual_seed(0))
    assert a.shape == (enc.latent_ctx * enc.d_latent,)
    assert torch.equal(a, b)
    assert a.abs().max() < 1


def test_encode_names_a_missing_file(small_transmitter):
    with pytest.raises(FileNotFoundError, match="no_such.glb"):
        shap_e.encode("no_such.glb", small_transmitter)


@pytest.fixture(scope="module")
def trained():
    """The bundled transmitter-small and a held-out procedural chair (thin legs: the encoder's worst case)."""
    from shap_e.data import iter_dataset
    from shap_e.models.download import load_model

    asset = next(a for a in iter_dataset("heldout_pairs", 48, 0) if a.category == "chair")
    return load_model("transmitter-small").eval(), asset


def _band_error(xm, latent, targets):
    with torch.no_grad():
        params = {k[len("nerstf."):]: v for k, v in xm.bottleneck_to_params(latent.clone()).items()}
        sdf = xm.renderer.nerstf.query(targets.sdf_points[None], params, None, ("sdf",)).sdf[0, :, 0]
    return float(((sdf / 0.1).clamp(-1, 1) - (targets.sdf_values / 0.1).clamp(-1, 1)).abs().mean())


def test_refining_a_latent_fits_its_asset_better_and_keeps_a_tanh_latent(tmp_path, trained):
    from shap_e.encoding import REFINE_TARGETS, refine_latent
    from shap_e.eval.metrics import to_eval_mesh, volumetric_iou
    from shap_e.encoding.targets import asset_targets
    from shap_e.encoding.assets import load_asset
    from shap_e.util.notebooks import decode_latent_mesh

    xm, asset = trained
    path = tmp_path / "chair.ply"
    asset.mesh.export(path)
    latent = shap_e.encode(path, xm, generator=torch.Generator().manual_seed(0))
    targets = asset_targets(load_asset(str(path)), generator=torch.Generator().manual_seed(1), **REFINE_TARGETS)
    before = {k: v.clone() for k, v in xm.state_dict().items()}
    refined = refine_latent(xm, latent[None], [targets], steps=200, generator=torch.Generator().manual_seed(0))[0]
    assert refined.shape == latent.shape and refined.abs().max() < 1
    assert all(torch.equal(before[k], v) for k, v in xm.state_dict().items())
    assert all(p.grad is None for p in xm.parameters())
    assert _band_error(xm, refined[None], targets) < 0.7 * _band_error(xm, latent[None], targets)

    def iou(z):
        mesh = decode_latent_mesh(xm, z, grid_size=48, vertex_placement="sampled")
        return volumetric_iou(to_eval_mesh(mesh), to_eval_mesh(load_asset(str(path))), 48)

    assert iou(refined) > iou(latent) + 0.1


def test_refining_a_batch_equals_refining_each_row(tmp_path, trained):
    from shap_e.encoding import refine_latent
    from shap_e.encoding.targets import asset_targets
    from shap_e.encoding.assets import load_asset

    xm, _ = trained
    meshes = [trimesh.creation.box(extents=(1.0, 0.5, 0.3)), trimesh.creation.icosphere(subdivisions=2)]
    targets = []
    for i, mesh in enumerate(meshes):
        mesh.export(tmp_path / f"{i}.ply")
        targets.append(asset_targets(load_asset(str(tmp_path / f"{i}.ply")), n_near=256, n_uniform=64, n_color=64,
                                     generator=torch.Generator().manual_seed(i)))
    latents = torch.rand(2, 128 * 32, generator=torch.Generator().manual_seed(0)) * 1.6 - 0.8
    options = dict(steps=5, sdf_per_step=None, color_per_step=None)
    together = refine_latent(xm, latents, targets, **options)
    alone = torch.cat([refine_latent(xm, latents[i:i + 1], targets[i:i + 1], **options) for i in range(2)])
    # Equal up to float noise (batched matmuls round differently and Adam's first steps amplify
    # near-zero gradients), far below the steps themselves (up to 5 x lr = 0.15).
    torch.testing.assert_close(together, alone, atol=1e-3, rtol=0)
    assert (together - latents).abs().max() > 0.05


def test_encode_refinement_is_reproducible_and_checks_its_steps(tmp_path, trained):
    xm, _ = trained
    path = tmp_path / "box.ply"
    trimesh.creation.box(extents=(1.0, 0.5, 0.3)).export(path)
    a = shap_e.encode(path, xm, generator=torch.Generator().manual_seed(0), refine_steps=10)
    b = shap_e.encode(path, xm, generator=torch.Generator().manual_seed(0), refine_steps=10)
    plain = shap_e.encode(path, xm, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and not torch.equal(a, plain)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="refine_steps must be a non-negative int"):
            shap_e.encode(path, xm, refine_steps=bad)


def test_refine_latent_names_a_bad_latent_shape_target_count_or_step_count(trained):
    from shap_e.encoding import refine_latent
    from shap_e.encoding.targets import AssetTargets

    xm, _ = trained
    target = AssetTargets(
        sdf_points=torch.zeros(8, 3), sdf_values=torch.zeros(8), color_points=torch.zeros(4, 3), colors=torch.zeros(4, 3)
    )
    latent = torch.zeros(1, 128 * 32)
    with pytest.raises(ValueError, match=r"latent must be \[batch, d\] with one target per row"):
        refine_latent(xm, latent[0], [target])
    with pytest.raises(ValueError, match="one target per row, got \\[1, 4096\\] and 2 targets"):
        refine_latent(xm, latent, [target, target])
    for bad in (-1, 1.5, False):
        with pytest.raises(ValueError, match="steps must be a non-negative int"):
            refine_latent(xm, latent, [target], steps=bad)
    assert torch.equal(refine_latent(xm, latent, [target], steps=0), latent)


def test_round_trip_is_encode_then_decode_with_the_same_seed(tmp_path, trained):
    from shap_e.encoding import round_trip
    from shap_e.util.notebooks import decode_latent_mesh

    xm, _ = trained
    path = tmp_path / "box.ply"
    trimesh.creation.box(extents=(1.0, 0.5, 0.3)).export(path)
    mesh = round_trip(path, xm, 24, "sampled", seed=3)
    latent = shap_e.encode(path, xm, generator=torch.Generator().manual_seed(3), seed=3)
    expected = decode_latent_mesh(xm, latent, grid_size=24, vertex_placement="sampled")
    assert torch.equal(mesh.verts, expected.verts) and torch.equal(mesh.faces, expected.faces)
    assert not torch.equal(round_trip(path, xm, 24, "sampled", seed=4).verts, mesh.verts)
