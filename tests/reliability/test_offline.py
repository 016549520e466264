"""Downloads that fail, against a local HTTP server on 127.0.0.1 that refuses, truncates, stalls and
serves the wrong bytes, and a cache holding a partial file: always one line (URL, cache path, the
command that retries) and exit status 2, nothing left in the cache, and the bundled model when the
user did not ask for another."""
import hashlib
import os
import http.server
import socket
import threading
import time

import pytest

from shap_e.cli import main
from shap_e.models import registry
from shap_e.models.download import fetch_file_cached
from shap_e.util.errors import ChecksumError, DownloadError

PAYLOAD = bytes(range(256)) * 400


class _Server(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server API)
        name = self.path.strip("/")
        body = PAYLOAD if name != "wrong.pt" else PAYLOAD[::-1]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if name == "truncated.pt":
            self.wfile.write(body[: len(body) // 3])
            self.wfile.flush()
            self.close_connection = True
            return
        if name == "stalled.pt":
            self.wfile.write(body[:100])
            self.wfile.flush()
            time.sleep(4)  # longer than the client's timeout
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _url(server, case: str) -> str:
    return f"http://127.0.0.1:{_closed_port()}/refused.pt" if case == "refused" else f"{server}/{case}.pt"


CASES = {"refused": "Connection refused", "truncated": "was interrupted after", "stalled": "timed out",
         "wrong": "has sha256"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_api_raises_one_line_and_caches_nothing(case, server, tmp_path):
    url = _url(server, case)
    expected = ChecksumError if case == "wrong" else DownloadError
    with pytest.raises(expected) as info:
        fetch_file_cached(url, False, tmp_path, sha256=hashlib.sha256(PAYLOAD).hexdigest(), timeout=1)
    message = str(info.value)
    assert "\n" not in message and CASES[case] in message and url in message
    if case != "wrong":
        assert str(tmp_path / f"{case}.pt") in message and "Retry with" in message
    assert list(tmp_path.iterdir()) == []  # no partial file, no temporary, no lock file


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_command_says_one_line_with_url_cache_path_and_retry_command(case, server, tmp_path, monkeypatch, capsys):
    url = _url(server, case)
    spec = registry.ModelSpec("net-model", "transmitter_small_config.yaml", url=url,
                              sha256=hashlib.sha256(PAYLOAD).hexdigest(), kind="transmitter")
    monkeypatch.setitem(registry.MODELS, "net-model", spec)
    monkeypatch.setenv("SHAP_E_DOWNLOAD_TIMEOUT", "1")
    cache = tmp_path / "cache"
    for argv in (["download", "net-model"], ["encode", "asset.ply", "-o", "x.pt", "--model", "net-model"]):
        if argv[0] == "encode":
            import trimesh

            trimesh.creation.box().export(tmp_path / "asset.ply")
            argv = [a if a != "asset.ply" else str(tmp_path / "asset.ply") for a in argv]
            argv[argv.index("x.pt")] = str(tmp_path / "x.pt")
        assert main(argv + ["--cache-dir", str(cache)]) == 2
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if "error:" in line]
        assert len(lines) == 1 and "Traceback" not in err and url in lines[0], err
        if case != "wrong":
            assert str(cache / f"{url.rsplit('/', 1)[1]}") in lines[0] and "`shap-e download net-model`" in lines[0]
        assert list(cache.iterdir()) == [] if cache.exists() else True


def test_a_partial_cached_file_is_corrupt_in_the_listing_and_the_bundled_model_is_used(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    cache.mkdir()
    spec = registry.MODELS["text300M"]
    (cache / spec.url.rsplit("/", 1)[1]).write_bytes(b"the first bytes of a download that was cut")
    monkeypatch.setenv("SHAP_E_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert any(line.startswith("text300M") and " corrupt " in line for line in out.splitlines()), out
    assert "text300M: the cached file is partial or corrupt (size or sha256 differs); run " \
           "`shap-e download text300M --redownload`" in out
    assert main(["text", "a red cube", "-o", str(tmp_path / "out"), "--steps", "2", "--grid-size", "16",
                 "--format", "ply"]) == 0
    err = capsys.readouterr().err
    assert "model: text-small (bundled); the cached text300M weights are partial or corrupt: run " \
           "`shap-e download text300M --redownload`" in err
    assert (tmp_path / "out" / "a_red_cube_seed0" / "mesh.ply").is_file()
    assert sorted(p.name for p in cache.iterdir()) == ["text_cond.pt"]  # untouched, no lock files


def test_a_verified_file_is_hashed_once_then_trusted_until_it_changes(server, tmp_path):
    from shap_e.models.cache import CORRUPT, OK, file_state

    sha = hashlib.sha256(PAYLOAD).hexdigest()
    path = fetch_file_cached(f"{server}/good.pt", False, tmp_path, sha256=sha)
    assert file_state(path, sha) == (OK, sha)
    with open(path, "r+b") as f:  # the same size, other bytes
        f.write(b"\xff")
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # as a write a moment later would leave it
    assert file_state(path, sha)[0] == CORRUPT
    os.truncate(path, 10)  # a cut file: another size
    assert file_state(path, sha)[0] == CORRUPT
