"""Fault injection: `shap-e text --prompts` killed with SIGTERM and SIGKILL at random moments, again
and again in the same output folder, then run to the end. At every moment each visible sample
folder is complete and equal to the one an uninterrupted run writes; at the end every sample is
there and no temporary is left.

The runs are processes forked from the test (the package already imported, as after `shap-e`'s
start), so that a kill costs a second rather than an interpreter start.
"""
import hashlib
import json
import multiprocessing
import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest

from shap_e.cli import main
from shap_e.util.atomic import TEMP_PREFIX

PROMPTS = ["a red cube", "a blue ball", "a green torus", "a yellow cone", "a white lamp", "a black chair",
           "an orange mushroom", "a purple table"]
KILLS = 20  # alternately SIGTERM and SIGKILL, each while the run is still going
CHAINS = 4  # output folders, each killed KILLS / CHAINS times before its final run


def _argv(prompts: Path, out: Path):
    return ["text", "--prompts", str(prompts), "-o", str(out), "--steps", "2", "--grid-size", "16",
            "--format", "ply", "--device", "cpu"]


def _child(argv, log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    os._exit(main(argv))


def digest(folder: Path) -> dict:
    """sha256 of every file of a sample folder (meta.json without its timings)."""
    out = {}
    for path in sorted(folder.iterdir()):
        data = path.read_bytes()
        if path.name == "meta.json":
            meta = json.loads(data)
            meta.pop("seconds")
            data = json.dumps(meta, sort_keys=True).encode()
        out[path.name] = hashlib.sha256(data).hexdigest()
    return out


def check_visible(out: Path, reference: dict) -> int:
    """Every visible entry is a complete sample equal to the reference; returns how many there are."""
    visible = [p for p in out.iterdir() if not p.name.startswith(".")] if out.exists() else []
    for folder in visible:
        assert folder.name in reference, f"unexpected {folder}"
        assert digest(folder) == reference[folder.name], f"{folder} is partial or differs from the reference"
    return len(visible)


@pytest.mark.slow
def test_killed_runs_never_leave_a_partial_or_different_sample(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SHAP_E_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    started = time.perf_counter()
    assert main(_argv(prompts, tmp_path / "reference")) == 0
    full_run = time.perf_counter() - started
    reference = {f.name: digest(f) for f in (tmp_path / "reference").iterdir()}
    assert len(reference) == len(PROMPTS)
    capsys.readouterr()

    fork = multiprocessing.get_context("fork")
    rng = random.Random(0)
    kills = {signal.SIGTERM: 0, signal.SIGKILL: 0}
    per_chain = KILLS // CHAINS
    for chain in range(CHAINS):
        out = tmp_path / f"chain{chain}"
        killed = 0
        while killed < per_chain:
            process = fork.Process(target=_child, args=(_argv(prompts, out), str(tmp_path / "children.log")))
            process.start()
            time.sleep(rng.uniform(0.05, 1.2) * full_run * (1 - check_visible(out, reference) / len(PROMPTS)))
            if process.exitcode is None:
                sig = signal.SIGTERM if sum(kills.values()) % 2 == 0 else signal.SIGKILL
                os.kill(process.pid, sig)
                kills[sig] += 1
                killed += 1
            process.join()
            assert process.exitcode in (0, 143, -signal.SIGTERM, -signal.SIGKILL), process.exitcode
            check_visible(out, reference)
        assert main(_argv(prompts, out)) == 0  # the run after the last kill finishes the job
        assert check_visible(out, reference) == len(PROMPTS)
        assert not [p.name for p in out.iterdir() if p.name.startswith(TEMP_PREFIX)]
    assert kills[signal.SIGTERM] >= KILLS // 2 and kills[signal.SIGKILL] >= KILLS // 2
    print(f"kills: {kills[signal.SIGTERM]} SIGTERM, {kills[signal.SIGKILL]} SIGKILL, 0 partial or lost samples")
