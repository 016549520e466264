"""100 generations in one process (as the web app or a notebook makes them) do not grow its memory."""
import gc
import sys

import pytest

from shap_e.cli import main

PROMPTS = ["a red cube", "a blue ball", "a green torus", "a yellow cone", "a white lamp", "a black chair",
           "an orange mushroom", "a purple table", "a grey vase", "a pink box"]
RUNS = 10  # of len(PROMPTS) generations each, after one run to warm up


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_a_hundred_generations_keep_the_resident_memory_flat(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SHAP_E_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")

    def generate(run: int) -> None:
        argv = ["text", "--prompts", str(prompts), "-o", str(tmp_path / f"run{run}"), "--seed", str(run),
                "--steps", "2", "--grid-size", "16", "--format", "glb,ply", "--device", "cpu"]
        assert main(argv) == 0, capsys.readouterr().err
        capsys.readouterr()
        gc.collect()

    generate(0)
    before = resident_bytes()
    for run in range(1, RUNS + 1):
        generate(run)
    after = resident_bytes()
    generations = sum(1 for run in range(1, RUNS + 1) for _ in (tmp_path / f"run{run}").iterdir())
    growth = (after - before) / before
    print(f"{generations} generations: RSS {before / 1e6:.0f} MB -> {after / 1e6:.0f} MB ({growth:+.2%})")
    assert generations == RUNS * len(PROMPTS)
    assert growth < 0.05
