"""File helpers of the official `shap_e.util.io` (official path and behaviour): YAML configs and a
buffered binary writer."""
import io
import os
from contextlib import contextmanager
from typing import Any, BinaryIO, Iterator, Union

import yaml

from shap_e.util.collections import AttrDict

__all__ = ["buffered_writer", "read_config"]


def read_config(path_or_file: Union[str, os.PathLike, io.IOBase]) -> Any:
    """The YAML document in a file (a path, or an open text or binary file); a mapping comes back
    as an `AttrDict`, anything else as YAML gives it."""
    if hasattr(path_or_file, "read"):
        name, obj = getattr(path_or_file, "name", "the file"), _load(path_or_file, "the file")
    else:
        name = os.fspath(path_or_file)
        with open(name, "rb") as f:
            obj = _load(f, name)
    return AttrDict(obj) if isinstance(obj, dict) else obj


def _load(stream, name: str) -> Any:
    try:
        return yaml.safe_load(stream)
    except yaml.YAMLError as e:
        raise ValueError(f"{name} is not valid YAML: {e}") from e


@contextmanager
def buffered_writer(raw_f: BinaryIO) -> Iterator[io.BufferedIOBase]:
    """A buffered binary stream over `raw_f` for the `with` block (`raw_f` itself when it is
    already buffered), flushed at the end. `raw_f` stays open."""
    if isinstance(raw_f, io.TextIOBase):
        raise TypeError("raw_f is a text stream; open the file in binary mode ('wb')")
    if isinstance(raw_f, io.BufferedIOBase):
        yield raw_f
        return
    writer = io.BufferedWriter(raw_f)
    try:
        yield writer
    finally:
        # detach() flushes, and leaves raw_f open when the writer is garbage-collected.
        writer.detach()
