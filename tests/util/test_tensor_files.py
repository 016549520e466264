"""Latent files: whatever is in the file, one clear error or one float32 latent; never code, never
a hint to load with weights_only=False."""
import os

import pytest
import torch

from shap_e.util.errors import CorruptFileError, InvalidArgumentError, NonFiniteError
from shap_e.util.tensor_files import load_latent, read_tensor_file, save_latent


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def _bad_files(folder):
    torch.save(torch.ones(4096), folder / "good.pt")
    data = (folder / "good.pt").read_bytes()
    (folder / "truncated.pt").write_bytes(data[: len(data) // 2])
    (folder / "empty.pt").write_bytes(b"")
    (folder / "random.pt").write_bytes(bytes(range(256)) * 4)
    (folder / "text.pt").write_text("a latent, surely")
    torch.save({"x": _Evil()}, folder / "evil.pt")
    return {"truncated.pt": "could not be read", "empty.pt": "is empty (0 bytes)", "random.pt": "could not be read",
            "text.pt": "could not be read", "evil.pt": "refused for safety"}


def test_unreadable_latent_files_are_one_line_errors_without_weights_only_advice(tmp_path):
    for name, message in _bad_files(tmp_path).items():
        with pytest.raises(CorruptFileError) as info:
            load_latent(tmp_path / name)
        text = str(info.value)
        assert message in text and str(tmp_path / name) in text, text
        assert "weights_only" not in text and "\n" not in text


def test_a_missing_latent_file_is_named(tmp_path):
    with pytest.raises(InvalidArgumentError, match="latent file '.*nope.pt' does not exist"):
        load_latent(tmp_path / "nope.pt")


def test_float_latents_are_cast_and_other_dtypes_refused(tmp_path):
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        torch.save(torch.linspace(-1, 1, 4096).to(dtype), tmp_path / "f.pt")
        latent = load_latent(tmp_path / "f.pt")
        assert latent.dtype == torch.float32 and latent.shape == (4096,)
    for dtype in (torch.int64, torch.bool, torch.complex64):
        torch.save(torch.zeros(4096, dtype=dtype), tmp_path / "i.pt")
        with pytest.raises(InvalidArgumentError, match="numbers; a latent is floating point"):
            load_latent(tmp_path / "i.pt")


def test_non_finite_latents_and_batches_are_refused(tmp_path):
    for bad in (float("nan"), float("inf")):
        torch.save(torch.full((4096,), bad), tmp_path / "n.pt")
        with pytest.raises(NonFiniteError, match="holds 4096 NaN or infinite values"):
            load_latent(tmp_path / "n.pt")
    torch.save(torch.zeros(3, 4096), tmp_path / "batch.pt")
    with pytest.raises(InvalidArgumentError, match=r"shape \[3, 4096\]; a latent is one flat vector"):
        load_latent(tmp_path / "batch.pt")
    torch.save(torch.zeros(1, 4096), tmp_path / "one.pt")
    assert load_latent(tmp_path / "one.pt").shape == (4096,)


def test_save_latent_stores_only_its_own_row(tmp_path):
    batch = torch.randn(4, 4096)
    save_latent(tmp_path / "row.pt", batch[2])
    back = torch.load(tmp_path / "row.pt", weights_only=True)
    assert torch.equal(back, batch[2]) and back.untyped_storage().nbytes() == 4096 * 4


def test_checkpoints_read_the_same_way(tmp_path):
    _bad_files(tmp_path)
    with pytest.raises(CorruptFileError, match="checkpoint .*evil.pt holds pickled Python objects"):
        read_tensor_file(tmp_path / "evil.pt", "checkpoint")
