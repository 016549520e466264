"""bench.data_workers times load_asset_records per worker count and checks the records agree."""
import dataclasses

import pytest
import torch

from bench import data_workers
from shap_e.data import write_dataset


def test_it_reports_equal_records_for_one_and_two_workers(tmp_path, capsys):
    write_dataset(tmp_path / "data", 2, seed=0)
    data_workers.main(["--data", str(tmp_path / "data"), "-n", "2", "--workers", "1,2"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("2 assets")
    assert [line.split(":")[0] for line in lines[1:]] == ["workers=1", "workers=2"]
    assert all(line.endswith("records equal to workers=1: True") for line in lines[1:])


def test_records_equal_notices_one_changed_number(tmp_path):
    from shap_e.models.configs import model_from_config
    from shap_e.train.run import read_config
    from shap_e.train.transmitter_training import load_asset_records, mesh_files

    write_dataset(tmp_path / "data", 1, seed=0)
    recipe = read_config(str(data_workers.ROOT / "recipes" / "transmitter-small.yaml"))
    encoder = model_from_config(read_config(str(data_workers.ROOT / recipe["model"]))).encoder
    records, _ = load_asset_records(mesh_files(tmp_path / "data"), encoder, None, 0, False, random_sample_count=2048,
                                    target_options=dict(n_near=64, n_uniform=32, n_color=32))
    changed = records[0].targets.sdf_values.clone()
    changed[0] += 1e-3
    other = [dataclasses.replace(records[0], targets=dataclasses.replace(records[0].targets, sdf_values=changed))]
    assert data_workers.records_equal(records, records)
    assert not data_workers.records_equal(records, other)
    assert not data_workers.records_equal(records, records + records)
    assert torch.equal(records[0].targets.sdf_points, other[0].targets.sdf_points)


def test_bad_counts_are_rejected_by_name(capsys):
    for argv, message in ((["-n", "0"], "-n and every --workers count must be at least 1"),
                          (["--workers", "1,0"], "-n and every --workers count must be at least 1"),
                          (["--workers", "one"], "--workers must be comma-separated integers, got 'one'")):
        with pytest.raises(SystemExit) as exit_info:
            data_workers.main(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
