"""A property-based fuzz of the `shap-e` command line, in-process through its entry point.

Over 500 generated command lines across every subcommand (`fuzz_commands.py`: numbers including
NaN, infinities, huge and negative ones; Unicode, empty and very long strings; missing, unwritable
and file-instead-of-folder paths), on the bundled models, offline. The property: exit status 0 with
valid outputs (meshes trimesh reads with finite vertices, pictures Pillow reads, strict JSON,
finite tensors), or exit status 2 with one error line on stderr; never a traceback, never another
status, never a temporary left behind. Not covered: training runs that would start (only broken
training configs are drawn) and `eval --references decoded|both` (120 encodings each).
"""
import contextlib
import dataclasses
import io
import json
import os
import socket
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402

from shap_e.cli import main  # noqa: E402
from shap_e.models import registry  # noqa: E402
from shap_e.util.atomic import TEMP_PREFIX  # noqa: E402

from .fuzz_commands import COMMANDS, QUOTAS, Inputs  # noqa: E402

SCALE = float(os.environ.get("SHAP_E_FUZZ_SCALE", "1"))  # a longer hunt: raise it (0.1 for a quick look)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _latents(folder: Path) -> dict:
    import trimesh

    from shap_e.encoding import encode
    from shap_e.models.download import load_model

    box = trimesh.creation.box(extents=(1.0, 0.6, 0.4))
    box.visual.vertex_colors = np.tile([220, 60, 30, 255], (len(box.vertices), 1))
    box.export(folder / "box.ply")
    good = encode(folder / "box.ply", load_model("transmitter-small"), generator=torch.Generator().manual_seed(0))
    tensors = {"good": good, "nan": torch.full_like(good, float("nan")), "inf": good.clone().index_fill(0, torch.tensor([3]), float("inf")),
               "half": good.half(), "int": (good * 100).long(), "batch": torch.stack([good, good]),
               "wrong_size": good[:100].clone()}
    paths = {}
    for name, tensor in tensors.items():
        torch.save(tensor.clone(), folder / f"{name}.pt")
        paths[name] = str(folder / f"{name}.pt")
    (folder / "empty.pt").write_bytes(b"")
    (folder / "random.pt").write_bytes(bytes(range(256)) * 8)
    torch.save({"x": Inputs}, folder / "evil.pt")
    paths.update(empty=str(folder / "empty.pt"), random=str(folder / "random.pt"), evil=str(folder / "evil.pt"))
    return paths


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Inputs:
    from PIL import Image

    from shap_e.data import write_dataset

    folder = tmp_path_factory.mktemp("fuzz_inputs")
    prompts = {"good": "a red cube\na blue ball\n", "issue": "a red cube\nun cubo rojo\n一个红色的立方体\n🟥🧊\na red cube\n"
               "A Red Cube!\n", "empty": "\n  \n", "long": " ".join(["word"] * 2000) + "\n"}
    for name, text in prompts.items():
        (folder / f"{name}.txt").write_text(text, encoding="utf-8")
    (folder / "binary.txt").write_bytes(b"\xff\xfe\x00\x81" * 20)
    Image.new("RGB", (64, 64), (200, 30, 30)).save(folder / "red.png")
    Image.new("RGB", (1, 1), (0, 0, 0)).save(folder / "tiny.png")
    (folder / "garbage.png").write_bytes(b"\x89PNG not really")
    (folder / "garbage.ply").write_bytes(b"ply\nformat nonsense\n" + bytes(range(256)))
    (folder / "empty.obj").write_bytes(b"")
    configs = {"bad_yaml": "a: [1, 2\n", "not_mapping": "- 1\n- 2\n", "unknown_keys": "foo: 1\n",
               "missing_data": "model: text-small\ndiffusion: diffusion-small\ndata: missing.safetensors\n"}
    for name, text in configs.items():
        (folder / f"{name}.yaml").write_text(text)
    write_dataset(folder / "dataset", 1)
    return Inputs(
        prompts={**{n: str(folder / f"{n}.txt") for n in prompts}, "binary": str(folder / "binary.txt")},
        latents=_latents(folder),
        assets={"box": str(folder / "box.ply"), "garbage": str(folder / "garbage.ply"),
                "empty": str(folder / "empty.obj")},
        images={n: str(folder / f"{n}.png") for n in ("red", "tiny", "garbage")},
        configs={n: str(folder / f"{n}.yaml") for n in configs},
        dataset=str(folder / "dataset"), cache=str(folder / "cache"),
    )


@pytest.fixture
def offline(monkeypatch, inputs):
    """The official weights' URLs point at a closed port on 127.0.0.1 (no network in CI, and none
    needed), and a registered `offline-model` downloads from one too."""
    monkeypatch.setenv("SHAP_E_CACHE", inputs.cache)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SHAP_E_DOWNLOAD_TIMEOUT", "2")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    port = _closed_port()
    for name, spec in list(registry.MODELS.items()):
        if spec.url is not None or spec.config_url is not None:
            moved = {field: f"http://127.0.0.1:{port}/{getattr(spec, field).rsplit('/', 1)[1]}"
                     for field in ("url", "config_url") if getattr(spec, field) is not None}
            monkeypatch.setitem(registry.MODELS, name, dataclasses.replace(spec, **moved))
    monkeypatch.setitem(registry.MODELS, "offline-model", registry.ModelSpec(
        "offline-model", "transmitter_small_config.yaml", url=f"http://127.0.0.1:{port}/offline.pt",
        sha256="0" * 64, kind="transmitter"))


def invoke(argv) -> tuple:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(list(argv))
        except SystemExit as exit_:
            code = exit_.code
    return code, err.getvalue()


def check_file(path: Path) -> None:
    """Raise unless `path` is a valid, finite output of its kind."""
    import trimesh
    from PIL import Image

    suffix = path.suffix.lower()
    if suffix in (".json", ".jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines() if suffix == ".jsonl" else [path.read_text()]:
            json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"{path}: {c}")))
    elif suffix in (".ply", ".obj", ".glb"):
        loaded = trimesh.load(path, force="scene", process=False)
        for geometry in loaded.geometry.values():
            assert np.isfinite(np.asarray(geometry.vertices)).all(), path
    elif suffix in (".gif", ".png"):
        with Image.open(path) as image:
            image.verify()
    elif suffix == ".pt":
        assert torch.isfinite(torch.load(path, weights_only=True)).all(), path
    elif suffix == ".safetensors":
        from safetensors.torch import load_file

        assert all(torch.isfinite(t.float()).all() for t in load_file(str(path)).values()), path
    elif suffix == ".mp4":
        assert path.stat().st_size > 0, path


def check_run(folder: Path, code: int, err: str, argv) -> None:
    assert code in (0, 2), (argv, code, err[-2000:])
    assert "Traceback" not in err, (argv, err[-4000:])
    if code == 2:
        errors = [line for line in err.splitlines() if ": error: " in line]
        assert len(errors) == 1 and err.rstrip().endswith(errors[0]), (argv, err[-2000:])
    leftovers = [p for p in folder.rglob("*") if p.name.startswith(TEMP_PREFIX)]
    assert not leftovers, (argv, leftovers)
    if code == 0:
        for path in folder.rglob("*"):
            if path.is_file() and path.name not in ("exists_file", "blocker"):
                check_file(path)


@pytest.mark.slow
def test_every_command_line_exits_0_with_valid_outputs_or_2_with_one_line(inputs, offline, tmp_path):
    import resource

    statuses, commands, seconds = Counter(), Counter(), Counter()
    home = os.getcwd()

    def run(argv):
        folder = tmp_path / f"run{sum(statuses.values())}"
        folder.mkdir()
        (folder / "exists_file").write_text("kept")
        (folder / "exists_dir").mkdir()
        (folder / "blocker").write_text("a file where a folder is expected")
        os.chdir(folder)
        started = resource.getrusage(resource.RUSAGE_SELF)
        try:
            code, err = invoke(argv)
        finally:
            os.chdir(home)
        ended = resource.getrusage(resource.RUSAGE_SELF)
        statuses[code] += 1
        commands[argv[0]] += 1
        seconds[f"{argv[0]}:{code}"] += ended.ru_utime + ended.ru_stime - started.ru_utime - started.ru_stime
        check_run(folder, code, err, argv)

    for name, quota in QUOTAS.items():
        @settings(max_examples=max(1, round(quota * SCALE)), deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(argv=COMMANDS[name](inputs))
        def fuzz(argv):
            run(argv)

        fuzz()
    total = sum(statuses.values())
    print(f"fuzz: {total} invocations, exit 0: {statuses[0]}, exit 2: {statuses[2]}, by command: "
          f"{dict(sorted(commands.items()))}; CPU seconds by command and status: "
          f"{ {k: round(v, 1) for k, v in sorted(seconds.items())} }", file=sys.stderr)
    assert set(statuses) <= {0, 2} and set(commands) == set(QUOTAS)
    assert total >= round(sum(QUOTAS.values()) * SCALE) and (SCALE < 1 or total >= 500 and statuses[0] >= 50)
