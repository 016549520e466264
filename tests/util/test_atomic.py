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


# ---- folders, writability and the temporaries of killed processes ---------------------------------


def test_atomic_directory_appears_complete_or_not_at_all(tmp_path):
    from shap_e.util.atomic import atomic_directory

    final = tmp_path / "sample"
    with pytest.raises(RuntimeError):
        with atomic_directory(final) as tmp:
            (tmp / "a.txt").write_text("half")
            raise RuntimeError("failed halfway")
    assert list(tmp_path.iterdir()) == []
    with atomic_directory(final) as tmp:
        (tmp / "a.txt").write_text("whole")
    assert (final / "a.txt").read_text() == "whole" and [p.name for p in tmp_path.iterdir()] == ["sample"]


def test_atomic_directory_replaces_an_existing_folder_only_when_asked(tmp_path):
    from shap_e.util.atomic import atomic_directory
    from shap_e.util.errors import OutputLocationError

    final = tmp_path / "sample"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with pytest.raises(OutputLocationError, match="already exists; it is kept"):
        with atomic_directory(final):
            pass
    with atomic_directory(final, overwrite=True) as tmp:
        (tmp / "new.txt").write_text("new")
    assert sorted(p.name for p in final.iterdir()) == ["new.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["sample"]


def test_outputs_follow_the_umask(tmp_path):
    import os
    import stat

    from shap_e.util.atomic import atomic_directory

    previous = os.umask(0o022)
    try:
        with atomic_directory(tmp_path / "sample") as tmp:
            write_atomic(tmp / "f.txt", "x")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "sample").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "sample" / "f.txt").stat().st_mode) == 0o644


def test_check_writable_creates_the_folder_and_names_a_file_in_the_way(tmp_path):
    from shap_e.util.atomic import check_writable
    from shap_e.util.errors import OutputLocationError

    assert check_writable(tmp_path / "a" / "b").is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputLocationError, match=r"cannot write to .*file/sub: .*file is a file, not a folder"):
        check_writable(tmp_path / "file" / "sub")
    with pytest.raises(OutputLocationError, match="cannot write to /proc/shap_e_out"):
        check_writable("/proc/shap_e_out")  # refused even to root
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "file"]  # the probe is gone


def test_only_our_own_stale_temporaries_are_cleaned(tmp_path):
    import multiprocessing
    import os

    from shap_e.util.atomic import TEMP_PREFIX, clean_stale_temporaries, temporary_path

    process = multiprocessing.get_context("fork").Process(target=os._exit, args=(0,))
    process.start()
    process.join()  # a process id that no longer runs
    dead = temporary_path(tmp_path / "sample_seed0")
    dead = dead.with_name(dead.name.replace(f"-{os.getpid()}-", f"-{process.pid}-"))
    dead.mkdir()
    (dead / "latent.pt").write_bytes(b"partial")
    alive = temporary_path(tmp_path / "sample_seed1")  # this process still runs: it is kept
    alive.mkdir()
    foreign = tmp_path / f"{TEMP_PREFIX}00000000-{process.pid}-00000000-x"  # another machine's
    foreign.mkdir()
    user = tmp_path / ".sample_seed2.abcd"  # not ours at all
    user.mkdir()
    assert clean_stale_temporaries(tmp_path) == [dead]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, foreign.name, user.name])
