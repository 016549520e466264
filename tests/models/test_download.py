"""Downloads against a real HTTP server on 127.0.0.1, and strict checkpoint loading."""
import hashlib
import http.server
import io
import socket
import threading
from pathlib import Path

import pytest
import torch
import yaml

from shap_e.models import download, registry
from shap_e.models.download import (
    ChecksumError,
    DownloadError,
    default_cache_dir,
    fetch_file_cached,
    load_config,
    load_model,
    load_state_dict_file,
)
from shap_e.models.registry import ModelSpec

PAYLOAD = bytes(range(256)) * 1200  # 300 KiB: several progress updates


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Handler(http.server.BaseHTTPRequestHandler):
    files: dict = {}
    requests: list = []

    def do_GET(self):  # noqa: N802 (http.server API)
        type(self).requests.append(self.path)
        name = self.path.lstrip("/")
        if name == "truncated.bin":
            # Promise the whole payload, send half, hang up: an interrupted transfer.
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAYLOAD)))
            self.end_headers()
            self.wfile.write(PAYLOAD[: len(PAYLOAD) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if name not in self.files:
            self.send_error(404)
            return
        body = self.files[name]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Handler.files["payload.bin"] = PAYLOAD
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _leftovers(folder: Path) -> list:
    """Files in the cache other than verification records (lock files count: none may be left)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".verified"))


def test_default_cache_dir_follows_env_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("SHAP_E_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("SHAP_E_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / ".cache" / "shap_e"


def test_fetch_downloads_verifies_and_reuses_cache(server, tmp_path):
    _Handler.requests.clear()
    path = fetch_file_cached(f"{server}/payload.bin", False, tmp_path, sha256=sha(PAYLOAD))
    assert path == str(tmp_path / "payload.bin") and Path(path).read_bytes() == PAYLOAD
    again = fetch_file_cached(f"{server}/payload.bin", False, tmp_path, sha256=sha(PAYLOAD))
    assert again == path and _Handler.requests == ["/payload.bin"]  # second call hit the cache only
    assert _leftovers(tmp_path) == ["payload.bin"]


def test_fetch_uses_shap_e_cache_env_when_no_cache_dir(server, tmp_path, monkeypatch):
    monkeypatch.setenv("SHAP_E_CACHE", str(tmp_path / "envcache"))
    path = fetch_file_cached(f"{server}/payload.bin", progress=False, sha256=sha(PAYLOAD))
    assert path == str(tmp_path / "envcache" / "payload.bin")


def test_fetch_shows_a_progress_bar_with_the_byte_count(server, tmp_path, capsys):
    fetch_file_cached(f"{server}/payload.bin", True, tmp_path, sha256=sha(PAYLOAD))
    err = capsys.readouterr().err
    assert "payload.bin" in err and "307k" in err  # 307,200 bytes, tqdm's unit_scale


def test_fetch_wrong_hash_raises_and_caches_nothing(server, tmp_path):
    with pytest.raises(ChecksumError) as info:
        fetch_file_cached(f"{server}/payload.bin", False, tmp_path, sha256="0" * 64)
    assert info.value.expected == "0" * 64 and info.value.actual == sha(PAYLOAD)
    assert _leftovers(tmp_path) == []


def test_interrupted_transfer_leaves_no_file_behind(server, tmp_path):
    with pytest.raises(DownloadError, match="interrupted"):
        fetch_file_cached(f"{server}/truncated.bin", False, tmp_path, sha256=sha(PAYLOAD))
    assert _leftovers(tmp_path) == []


def test_corrupt_cached_file_is_reported_and_replaced_only_on_request(server, tmp_path):
    (tmp_path / "payload.bin").write_bytes(b"stale")
    with pytest.raises(ChecksumError) as info:
        fetch_file_cached(f"{server}/payload.bin", False, tmp_path, sha256=sha(PAYLOAD))
    message = str(info.value)
    assert str(tmp_path / "payload.bin") in message and sha(PAYLOAD) in message and sha(b"stale") in message
    assert (tmp_path / "payload.bin").read_bytes() == b"stale"
    path = fetch_file_cached(f"{server}/payload.bin", False, tmp_path, sha256=sha(PAYLOAD), redownload=True)
    assert Path(path).read_bytes() == PAYLOAD


def test_offline_error_names_url_cache_path_and_command(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}/weights.pt"  # nothing listens there
    with pytest.raises(DownloadError) as info:
        fetch_file_cached(url, False, tmp_path, sha256="a" * 64, timeout=5)
    message = str(info.value)
    assert url in message and str(tmp_path / "weights.pt") in message and "Retry with the same call" in message
    assert "\n" not in message
    assert _leftovers(tmp_path) == []


def test_http_404_is_a_download_error(server, tmp_path):
    with pytest.raises(DownloadError, match="HTTP 404"):
        fetch_file_cached(f"{server}/nope.pt", False, tmp_path, sha256="a" * 64)


def test_bad_sha256_argument_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="sha256"):
        fetch_file_cached("http://127.0.0.1/x", cache_dir=tmp_path, sha256="abc")


def test_load_config_reads_shipped_yaml():
    config = load_config("text300M")
    assert config["name"] == "SplitVectorDiffusion" and config["inner"]["layers"] == 24
    assert load_config("diffusion")["timesteps"] == 1024


def test_load_config_official_download_is_hash_checked(server, tmp_path, monkeypatch):
    body = registry.config_path(registry.MODELS["text300M"]).read_bytes()
    _Handler.files["text_cond_config.yaml"] = body
    spec = ModelSpec("cfgtest", "text_cond_config.yaml", config_url=f"{server}/text_cond_config.yaml",
                     config_sha256=registry.MODELS["text300M"].config_sha256)
    monkeypatch.setitem(registry.MODELS, "cfgtest", spec)
    assert load_config("cfgtest", cache_dir=tmp_path, official=True) == yaml.safe_load(body)
    _Handler.files["text_cond_config.yaml"] = body + b"\n# edited\n"
    monkeypatch.setitem(registry.MODELS, "cfgtest", ModelSpec(
        "cfgtest", "x.yaml", config_url=f"{server}/text_cond_config.yaml", config_sha256=spec.config_sha256))
    with pytest.raises(ChecksumError):
        load_config("cfgtest", cache_dir=tmp_path / "other", official=True)


# ---- load_model: the tiny text-conditional transformer of golden a -----------------------------


@pytest.fixture
def tiny(golden, tmp_path, server, monkeypatch):
    """Register 'tiny-text' whose weights are served by the local server."""
    config = golden("a")["config"]["variant_A"]
    state = golden("a")["state_dict"]["variant_A"]
    buffer = io.BytesIO()
    torch.save(state, buffer)
    _Handler.files["tiny.pt"] = buffer.getvalue()
    config_file = tmp_path / "tiny.yaml"
    config_file.write_text(yaml.safe_dump(config))
    spec = ModelSpec("tiny-text", str(config_file), url=f"{server}/tiny.pt", sha256=sha(buffer.getvalue()))
    monkeypatch.setitem(registry.MODELS, "tiny-text", spec)
    return config, state


def test_load_model_downloads_builds_and_loads_strictly(tiny, tmp_path, golden):
    config, state = tiny
    model = load_model("tiny-text", cache_dir=tmp_path / "cache", progress=False)
    assert not model.training
    loaded = model.state_dict()
    assert set(loaded) == set(state) and all(torch.equal(loaded[k], state[k]) for k in state)
    case = golden("a")["inputs"]["cases"][0]
    with torch.no_grad():
        out = model(golden("a")["inputs"]["x"], case["t"], embeddings=case["embeddings"])
    torch.testing.assert_close(out, golden("a")["outputs"]["variant_A"][0], atol=2e-5, rtol=0)


def test_load_model_accepts_local_safetensors_and_pt(tiny, tmp_path):
    from safetensors.torch import save_file

    _, state = tiny
    save_file({k: v.contiguous() for k, v in state.items()}, tmp_path / "w.safetensors")
    torch.save(state, tmp_path / "w.pt")
    for name in ("w.safetensors", "w.pt"):
        model = load_model("tiny-text", weights_path=tmp_path / name)
        assert torch.equal(model.state_dict()["wrapped.pos_emb"], state["wrapped.pos_emb"])


def test_load_model_strict_error_lists_bad_keys(tiny, tmp_path):
    _, state = tiny
    bad = dict(state)
    bad.pop("wrapped.ln_post.weight")
    bad["wrapped.extra"] = torch.zeros(1)
    bad["wrapped.pos_emb"] = torch.zeros(3, 3)
    torch.save(bad, tmp_path / "bad.pt")
    with pytest.raises(ValueError) as info:
        load_model("tiny-text", weights_path=tmp_path / "bad.pt")
    message = str(info.value)
    assert "1 missing keys: wrapped.ln_post.weight" in message
    assert "1 unexpected keys: wrapped.extra" in message
    assert "wrapped.pos_emb (3, 3) vs model (8, 64)" in message


def test_truncated_checkpoint_gives_a_clear_error(tiny, tmp_path):
    _, state = tiny
    torch.save(state, tmp_path / "full.pt")
    data = (tmp_path / "full.pt").read_bytes()
    for name, body in (("cut.pt", data[: len(data) // 2]), ("cut.safetensors", data[:100])):
        (tmp_path / name).write_bytes(body)
        with pytest.raises(ValueError, match="truncated or corrupt"):
            load_state_dict_file(tmp_path / name)


class _Evil:
    pass


def test_checkpoint_with_pickled_objects_is_refused(tmp_path):
    torch.save({"x": _Evil()}, tmp_path / "evil.pt")
    with pytest.raises(ValueError, match="refused for safety"):
        load_state_dict_file(tmp_path / "evil.pt")


def test_invalid_device_is_rephrased():
    with pytest.raises(ValueError, match="device='cdua' is not a valid device; use 'cpu', 'cuda'"):
        load_model("text300M", device="cdua")


def test_config_only_and_unknown_names_are_rejected_before_any_download():
    with pytest.raises(ValueError, match="config-only"):
        load_model("diffusion")
    with pytest.raises(ValueError, match="valid names are: .*text300M"):
        load_model("text3000M")


def test_download_module_keeps_official_public_names():
    for name in ("load_model", "load_config", "fetch_file_cached", "default_cache_dir", "hash_file",
                 "load_checkpoint"):
        assert callable(getattr(download, name))
