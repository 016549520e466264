"""Transmitter training on procedural assets: the loss falls; bad assets are skipped and counted."""
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from shap_e.data import write_dataset
from shap_e.models.configs import model_from_config
from shap_e.train.loop import TrainConfig, Trainer
from shap_e.train.transmitter_training import (
    LossWeights,
    load_asset_records,
    mesh_files,
    transmitter_batch_fn,
    transmitter_loss_fn,
)


@pytest.fixture(scope="module")
def tiny_setup(golden, tmp_path_factory):
    folder = tmp_path_factory.mktemp("assets")
    write_dataset(folder, n=3, seed=0)
    (folder / "broken.obj").write_text("this is not a mesh\n")
    torch.manual_seed(0)
    model = model_from_config(golden("e")["config"])
    return folder, model


@pytest.mark.slow
def test_transmitter_loss_falls_on_procedural_assets(tiny_setup, tmp_path):
    folder, model = tiny_setup
    with pytest.warns(UserWarning, match="skipped 1 unreadable asset"):
        records, skipped = load_asset_records(mesh_files(folder), model.encoder, progress=False)
    assert len(records) == 3 and skipped[0][0].endswith("broken.obj")
    batch_fn = transmitter_batch_fn(records, assets_per_step=2, n_sdf=512, n_color=256, n_rays=64, seed=0)
    loss_fn = transmitter_loss_fn(LossWeights(), torch.device("cpu"))
    config = TrainConfig(steps=60, lr=2e-3, out_dir=str(tmp_path), progress=False, ema_decay=0.0)
    trainer = Trainer(model, loss_fn, batch_fn, config)
    losses = [trainer.train_step()["loss"] for _ in range(60)]
    assert sum(losses[-8:]) / 8 < 0.7 * sum(losses[:8]) / 8


def test_empty_dataset_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="holds no mesh files"):
        mesh_files(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        mesh_files(tmp_path / "missing")


def test_nerf_weight_zero_skips_rendering(tiny_setup, monkeypatch):
    import shap_e.train.transmitter_training as tt

    folder, model = tiny_setup
    with pytest.warns(UserWarning):
        records, _ = load_asset_records(mesh_files(folder)[:1] + [folder / "broken.obj"], model.encoder, progress=False)
    batch = transmitter_batch_fn(records, 1, n_sdf=32, n_color=16, n_rays=8, seed=0)(0, 0, 1)

    def no_render(*args, **kwargs):
        raise AssertionError("render_rays must not run when the NeRF weight is 0")

    monkeypatch.setattr(tt, "render_rays", no_render)
    terms = transmitter_loss_fn(LossWeights(nerf=0.0), torch.device("cpu"))(model, batch)
    assert terms["nerf"].item() == 0.0 and torch.isfinite(terms["loss"])


def test_points_only_encoder_records_have_no_views_and_the_band_term_weights_the_surface(
    tiny_setup, points_only_transmitter
):
    folder, _ = tiny_setup
    config = points_only_transmitter()
    torch.manual_seed(0)
    model = model_from_config(config).eval()  # eval: no bottleneck noise, so three forwards agree
    records, _ = load_asset_records(
        mesh_files(folder)[:2], model.encoder, progress=False, random_sample_count=2048,
        target_options=dict(n_near=256, n_uniform=64, n_color=64, sigma=[0.005, 0.05]),
    )
    assert all(r.batch.views is None for r in records) and len(records[0].targets.sdf_points) == 320
    batch = transmitter_batch_fn(records, 2, n_sdf=64, n_color=16, n_rays=8, seed=0)(0, 0, 1)
    assert batch.rays is None and batch.ray_colors is None
    plain = transmitter_loss_fn(LossWeights(nerf=1.0), torch.device("cpu"))(model, batch)
    banded = transmitter_loss_fn(LossWeights(nerf=1.0, sdf_band=0.1), torch.device("cpu"))(model, batch)
    with torch.no_grad():
        mlp = {k[len("nerstf."):]: v for k, v in model(batch.encoder_batch).items()}
        sdf = model.renderer.nerstf.query(batch.sdf_points, mlp, None, ("sdf",)).sdf[..., 0]
    target = batch.sdf_values.clamp(-1, 1)
    band_term = ((sdf / 0.1).clamp(-1, 1) - (target / 0.1).clamp(-1, 1)).abs().mean()
    torch.testing.assert_close(banded["sdf"] - plain["sdf"], band_term, atol=1e-5, rtol=1e-4)
    assert plain["nerf"].item() == 0.0  # no views: the NeRF term is skipped even with a weight


def test_targets_are_cached_by_content_seed_and_options(tiny_setup, tmp_path):
    from shap_e.train.transmitter_training import cached_asset_targets

    folder, _ = tiny_setup
    path = str(mesh_files(folder)[0])
    options = dict(n_near=64, n_uniform=32, n_color=16)
    first = cached_asset_targets(path, 5, options, tmp_path)
    assert len(list(tmp_path.glob("targets_*.pt"))) == 1
    again = cached_asset_targets(path, 5, options, tmp_path)
    assert torch.equal(first.sdf_values, again.sdf_values) and torch.equal(first.colors, again.colors)
    cached_asset_targets(path, 6, options, tmp_path)
    cached_asset_targets(path, 5, dict(options, n_near=65), tmp_path)
    assert len(list(tmp_path.glob("targets_*.pt"))) == 3
    uncached = cached_asset_targets(path, 5, options, None)
    assert torch.equal(first.sdf_points, uncached.sdf_points)


def test_two_workers_prepare_the_same_records_as_one_and_skip_the_same_asset(tiny_setup, points_only_transmitter):
    folder, _ = tiny_setup
    config = points_only_transmitter(inner_batch_size=128)
    encoder = model_from_config(config).encoder
    options = dict(random_sample_count=1024, target_options=dict(n_near=64, n_uniform=32, n_color=16))
    paths = mesh_files(folder)
    with pytest.warns(UserWarning, match="skipped 1 unreadable asset"):
        serial, serial_skipped = load_asset_records(paths, encoder, progress=False, **options)
    with pytest.warns(UserWarning, match="skipped 1 unreadable asset"):
        parallel, parallel_skipped = load_asset_records(paths, encoder, progress=False, workers=2, **options)
    assert parallel_skipped == serial_skipped and len(parallel) == len(serial) == 3
    for a, b in zip(serial, parallel):
        assert torch.equal(a.batch.points, b.batch.points)
        for name in ("sdf_points", "sdf_values", "color_points", "colors"):
            assert torch.equal(getattr(a.targets, name), getattr(b.targets, name)), name
    with pytest.raises(ValueError, match="workers must be at least 1"):
        load_asset_records(paths, encoder, progress=False, workers=0)


def test_workers_finish_when_the_caller_runs_torch_with_two_threads(tiny_setup, tmp_path):
    """A forked worker that ran torch with the caller's two OpenMP threads used to hang."""
    folder, _ = tiny_setup
    script = textwrap.dedent(f"""
        import torch
        from shap_e.models.configs import model_from_config
        from shap_e.train.run import read_config
        from shap_e.train.transmitter_training import load_asset_records, mesh_files
        torch.set_num_threads(2)
        a = torch.randn(512, 512)
        for _ in range(3):
            a = (a @ a).tanh()  # the caller's OpenMP thread pool is running before the fork
        encoder = model_from_config(read_config("shap_e/configs/transmitter_small_config.yaml")).encoder
        paths = [p for p in mesh_files({str(folder)!r}) if p.name != "broken.obj"]
        records, _ = load_asset_records(paths, encoder, progress=False, random_sample_count=1024,
                                        target_options=dict(n_near=64, n_uniform=32, n_color=16), workers=2)
        print(len(records))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180,
                            cwd=str(Path(__file__).resolve().parents[2]))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "3"
