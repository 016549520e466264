"""`shap_e.util.io`: YAML configs from paths or open files, and the buffered binary writer."""
import io

import pytest

from shap_e.util.collections import AttrDict
from shap_e.util.io import buffered_writer, read_config


def test_read_config_from_a_path_or_an_open_file_gives_an_attrdict(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("schedule: exp\ntimesteps: 1024\nnested: {a: [1, {b: 2}]}\n")
    for source in (str(path), path):
        config = read_config(source)
        assert isinstance(config, AttrDict) and config.schedule == "exp" and config["nested/a"][1].b == 2
    with open(path, "rb") as binary, open(path) as text:
        assert read_config(binary) == read_config(text) == read_config(str(path))
    assert read_config(io.StringIO("- 1\n- 2\n")) == [1, 2]  # not a mapping: returned as is


def test_read_config_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.yaml"):
        read_config(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ValueError, match="bad.yaml is not valid YAML"):
        read_config(str(bad))


def test_buffered_writer_buffers_a_raw_stream_flushes_and_leaves_it_open(tmp_path):
    path = tmp_path / "out.bin"
    with open(path, "wb", buffering=0) as raw:
        with buffered_writer(raw) as f:
            assert isinstance(f, io.BufferedWriter) and f is not raw
            f.write(b"abc")
        del f  # collecting the writer must not close the raw file
        assert not raw.closed
        raw.write(b"d")
    assert path.read_bytes() == b"abcd"


def test_buffered_writer_passes_a_buffered_stream_through_and_refuses_text():
    buffer = io.BytesIO()
    with buffered_writer(buffer) as f:
        assert f is buffer
        f.write(b"x")
    assert buffer.getvalue() == b"x"
    with pytest.raises(TypeError, match="binary mode"):
        with buffered_writer(io.StringIO()):
            pass
