"""recipes/family.sh runs the recipe's commands in order, with the transmitter thread count asked for,
and fails when a stage fails (a stand-in `shap-e` on PATH records each call; nothing trains)."""
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FAKE_SHAP_E = """#!/bin/bash
echo "$* threads=$OMP_NUM_THREADS" >> "$CALLS"
mkdir -p runs/small
[ -n "$FAIL_ON" ] && [[ "$*" == *"$FAIL_ON"* ]] && exit 3
exit 0
"""


@pytest.fixture
def family(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    (tmp_path / "recipes").mkdir()
    shutil.copy(REPO / "recipes" / "family.sh", tmp_path / "recipes" / "family.sh")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "shap-e"
    fake.write_text(FAKE_SHAP_E)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)

    def run(**env):
        calls = tmp_path / "calls.txt"
        calls.unlink(missing_ok=True)
        full_env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", CALLS=str(calls), **env)
        proc = subprocess.run(["bash", "recipes/family.sh"], cwd=tmp_path, env=full_env, capture_output=True,
                              text=True, timeout=60)
        return proc, calls.read_text().splitlines() if calls.exists() else []

    return run


def test_family_script_runs_every_stage_in_order_with_the_transmitter_threads(family):
    proc, calls = family(TRANSMITTER_THREADS="2")
    assert proc.returncode == 0, proc.stderr
    assert calls[:5] == [
        "dataset runs/small/train --n 640 --split train --seed 0 threads=1",
        "dataset runs/small/train_image --n 1920 --split train --seed 0 threads=1",
        "train transmitter --config recipes/transmitter-small.yaml threads=2",
        "train transmitter --config recipes/transmitter-small-encoder.yaml threads=2",
        "train transmitter --config recipes/transmitter-small-encoder-2.yaml threads=2",
    ]
    chains = calls[5:]  # the two prior chains run side by side: their calls may interleave
    heads = [" ".join(c.split(" ")[:2]) for c in chains]
    text = [h for h in heads if h in ("latents runs/small/train", "train text")]
    image = [h for h in heads if h in ("latents runs/small/train_image", "train image")]
    assert text == ["latents runs/small/train", "train text"]
    assert image == ["latents runs/small/train_image", "train image"]
    assert all(c.endswith("threads=1") for c in chains)
    assert all("--weights runs/small/transmitter_encoder_2/model.safetensors" in c for c in chains if "latents" in c)
    assert "family_done" in proc.stdout


def test_family_script_defaults_to_one_transmitter_thread(family):
    proc, calls = family()
    assert proc.returncode == 0, proc.stderr
    assert [c for c in calls if c.startswith("train transmitter")][0].endswith("threads=1")


@pytest.mark.parametrize("failing", ["transmitter-small-encoder.yaml", "train image"])
def test_family_script_stops_with_an_error_when_a_stage_fails(family, failing):
    proc, calls = family(FAIL_ON=failing)
    assert proc.returncode != 0
    assert "family_done" not in proc.stdout
    if failing.startswith("transmitter"):
        assert not any("encoder-2" in c or c.startswith("latents") for c in calls)
