"""write_atomic: whole files or nothing."""
import pytest

from shap_e.util.atomic import write_atomic, write_safetensors


def test_writes_bytes_and_text_as_utf8_and_replaces_an_existing_file(tmp_path):
    path = tmp_path / "out.txt"
    write_atomic(path, b"old")
    write_atomic(path, "grün\n")
    assert path.read_bytes() == "grün\n".encode("utf-8")
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_a_failed_write_names_the_path_and_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.bin"
    write_atomic(path, b"kept")
    with pytest.raises(TypeError):
        write_atomic(path, 123)  # not bytes: fails inside the write, after the temporary exists
    assert path.read_bytes() == b"kept"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]
    missing = tmp_path / "no_such_dir" / "x.bin"
    with pytest.raises(OSError, match="cannot write .*x.bin"):
        write_atomic(missing, b"data")


def test_write_atomic_with_hands_the_writer_a_temporary_with_the_target_suffix(tmp_path):
    import torch

    from shap_e.util.atomic import write_atomic_with

    path = tmp_path / "state.pt"
    seen = []

    def save(tmp):
        seen.append(tmp)
        assert tmp.parent == tmp_path and tmp.suffix == ".pt" and tmp != path
        torch.save({"x": torch.arange(3)}, tmp)

    write_atomic_with(path, save)
    assert torch.equal(torch.load(path, weights_only=True)["x"], torch.arange(3))
    assert not seen[0].exists()
    assert [p.name for p in tmp_path.iterdir()] == ["state.pt"]


def test_write_atomic_with_keeps_the_old_file_when_the_writer_fails_halfway(tmp_path):
    from shap_e.util.atomic import write_atomic_with

    path = tmp_path / "out.bin"
    write_atomic(path, b"kept")

    def half_then_fail(tmp):
        tmp.write_bytes(b"half")
        raise RuntimeError("writer failed")

    with pytest.raises(RuntimeError, match="writer failed"):
        write_atomic_with(path, half_then_fail)
    assert path.read_bytes() == b"kept"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_write_safetensors_round_trips_with_a_plain_files_permissions(tmp_path):
    import os
    import stat

    import torch
    from safetensors.torch import load_file

    tensors = {"a": torch.arange(6.0).view(2, 3).t(), "b": torch.ones(2, dtype=torch.uint8)}  # "a" not contiguous
    previous = os.umask(0o022)
    try:
        write_safetensors(tmp_path / "w.safetensors", tensors)
    finally:
        os.umask(previous)
    back = load_file(str(tmp_path / "w.safetensors"))
    assert torch.equal(back["a"], tensors["a"]) and torch.equal(back["b"], tensors["b"])
    assert stat.S_IMODE((tmp_path / "w.safetensors").stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["w.safetensors"]
