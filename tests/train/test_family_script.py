"""recipes/family.sh runs the recipe's commands in order, with the transmitter thread counts asked for,
and fails when a stage fails (a stand-in `shap-e` on PATH records each call; nothing trains)."""
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

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


S1, S1B, S1C = (f"train transmitter --config recipes/{name}.yaml"
                for name in ("transmitter-small", "transmitter-small-encoder", "transmitter-small-encoder-2"))
FWD = "--forward-threads 2"  # the default: the transmitter stages' forward passes on two threads


def check_prior_chains(chains):
    """The two prior chains run side by side, their calls possibly interleaved, both after stage 1c."""
    heads = [" ".join(c.split(" ")[:2]) for c in chains]
    text = [h for h in heads if h in ("latents runs/small/train", "train text")]
    image = [h for h in heads if h in ("latents runs/small/train_image", "train image")]
    assert text == ["latents runs/small/train", "train text"]
    assert image == ["latents runs/small/train_image", "train image"]
    assert all(c.endswith("threads=1") for c in chains)
    latents = [c for c in chains if c.startswith("latents")]
    assert all("--weights runs/small/transmitter_encoder_2/model.safetensors" in c for c in latents)
    assert all("--cache-dir runs/small/cache" in c for c in latents)  # stage 1's cached encoder batches
    # the text latents read the MiniLM hidden states the bundled prior reads when it samples
    layers = yaml.safe_load((REPO / "shap_e" / "configs" / "text_small_config.yaml").read_text())["text_layers"]
    text_latents = [c for c in latents if c.startswith("latents runs/small/train ")]
    assert len(text_latents) == 1 and f"--text-layers {','.join(map(str, layers))} " in text_latents[0]
    # the text latents are refined against their objects (the bundled prior's recipe); the image latents are not
    assert "--refine-steps 100" in text_latents[0]
    assert all("--refine-steps" not in c for c in latents if c.startswith("latents runs/small/train_image "))


def test_family_script_with_two_transmitter_threads_runs_each_stage_alone(family):
    proc, calls = family(TRANSMITTER_THREADS="2")
    assert proc.returncode == 0, proc.stderr
    assert calls[:5] == [
        "dataset runs/small/train --n 640 --split train --seed 0 threads=1",
        "dataset runs/small/train_image --n 1920 --split train --seed 0 threads=1",
        f"{S1} {FWD} threads=2",
        f"{S1B} {FWD} threads=2",
        f"{S1C} {FWD} threads=2",
    ]
    assert not any("--prepare-only" in c for c in calls)  # nothing beside a two-thread stage
    check_prior_chains(calls[5:])
    assert "family_done" in proc.stdout


def test_family_script_with_one_thread_prepares_stages_1b_and_1c_while_stage_1_trains(family):
    proc, calls = family()
    assert proc.returncode == 0, proc.stderr
    assert calls[2] == f"{S1} --prepare-only threads=1"
    # stage 1's training and the later stages' preparation run side by side: their calls may interleave
    side_by_side = sorted(calls[3:6])
    assert side_by_side == sorted([
        f"{S1} --forward-threads 1 --stop-at 2500 threads=1",  # two threads beside the preparation: slower
        f"{S1B} --prepare-only --data-workers 1 threads=1",
        f"{S1C} --prepare-only --data-workers 1 threads=1",
    ])
    assert calls.index(f"{S1B} --prepare-only --data-workers 1 threads=1") < calls.index(
        f"{S1C} --prepare-only --data-workers 1 threads=1")
    # the rest of stage 1 once the preparation is done, with the forward passes on two threads
    assert calls[6:9] == [f"{S1} {FWD} --resume threads=1", f"{S1B} {FWD} threads=1", f"{S1C} {FWD} threads=1"]
    check_prior_chains(calls[9:])
    assert "family_done" in proc.stdout


def test_family_script_takes_stage_1s_split_step_from_stage1_split(family):
    proc, calls = family(STAGE1_SPLIT="1200")
    assert proc.returncode == 0, proc.stderr
    stage1 = [c for c in calls if c.startswith(S1 + " --forward")]
    assert stage1 == [f"{S1} --forward-threads 1 --stop-at 1200 threads=1", f"{S1} {FWD} --resume threads=1"]


@pytest.mark.parametrize("failing, threads", [
    ("transmitter-small-encoder.yaml --prepare-only", "1"),  # a preparation beside stage 1
    ("transmitter-small-encoder.yaml", "2"),  # a training stage
    ("train image", "1"),  # a prior chain
])
def test_family_script_stops_with_an_error_when_a_stage_fails(family, failing, threads):
    proc, calls = family(FAIL_ON=failing, TRANSMITTER_THREADS=threads)
    assert proc.returncode != 0
    assert "family_done" not in proc.stdout
    if failing.startswith("transmitter"):
        assert not any(c.startswith((f"{S1C} {FWD}", "latents")) for c in calls)
    if "--prepare-only" in failing:
        assert f"{S1} {FWD} --resume threads=1" not in calls  # the script stops at the failed preparation
        assert f"{S1B} {FWD} threads=1" not in calls  # stage 1b does not train without its data


def test_family_script_takes_the_forward_thread_count_from_forward_threads(family):
    proc, calls = family(FORWARD_THREADS="1")
    assert proc.returncode == 0, proc.stderr
    training = [c for c in calls if c.startswith("train transmitter") and "--prepare-only" not in c]
    assert training == [
        f"{S1} --forward-threads 1 --stop-at 2500 threads=1", f"{S1} --forward-threads 1 --resume threads=1",
        f"{S1B} --forward-threads 1 threads=1", f"{S1C} --forward-threads 1 threads=1",
    ]
    proc, calls = family(FORWARD_THREADS="3", TRANSMITTER_THREADS="2")
    training = [c for c in calls if c.startswith("train transmitter")]
    assert training == [f"{S1} --forward-threads 3 threads=2", f"{S1B} --forward-threads 3 threads=2",
                        f"{S1C} --forward-threads 3 threads=2"]
