"""samples/index.html in headless Chromium: every <model-viewer> loads its GLB, offline.

The page is served from a tiny gallery made by `samples/make_gallery.py` (stand-in models), with
`samples/node_modules` (from `npm ci`) linked beside it. Chromium resolves no host but 127.0.0.1,
so a page that needed the network would fail. Skipped, with the reason, where Chromium,
chromedriver, selenium or node_modules are missing, unless $SHAP_E_REQUIRE_BROWSER=1
(`.ci/gallery.sh`), which turns those skips into failures. The screenshot goes to
$SHAP_E_ARTIFACTS (default `test-artifacts/`) as `gallery.png`.
"""
import functools
import http.server
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
ARTIFACTS = Path(os.environ.get("SHAP_E_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts"))
LOAD_TIMEOUT_S = 120
UPGRADE_TIMEOUT_S = 30
STATUS_JS = """return {
  viewers: document.querySelectorAll("model-viewer").length,
  upgraded: !!customElements.get("model-viewer"),
  loaded_property: [...document.querySelectorAll("model-viewer")].filter(v => v.loaded).length,
  loaded_events: window.galleryStatus.loaded,
  failed: window.galleryStatus.failed,
  failed_figures: document.querySelectorAll("figure.failed").length,
};"""


def missing(reason: str) -> None:
    if os.environ.get("SHAP_E_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (SHAP_E_REQUIRE_BROWSER=1: the browser test must run)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium through chromedriver, with WebGL on SwiftShader and no DNS but localhost."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing("selenium is not installed (pip install selenium)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not chromium or not driver_path:
        missing("Chromium or chromedriver is not installed (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,900",
                 "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
                 "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    yield driver
    driver.quit()


def save_screenshot(browser, path, tries: int = 5) -> bool:
    """Stop the viewers' auto-rotation, then save a screenshot of the page; retry when the renderer
    is still busy drawing.

    SwiftShader draws every viewer on the CPU: on a loaded 2-core machine chromedriver's 10-second
    wait for the renderer can pass before a page of 20 viewers is drawn (seen three times in a row
    with two evaluation processes beside the suite). A rotating viewer asks for a new frame all the
    time; a still one only when something changed, so the renderer can go idle (48 rotating viewers
    beside two training processes timed out five times in a row).
    """
    from selenium.common.exceptions import TimeoutException

    browser.execute_script("document.querySelectorAll('model-viewer').forEach(v => v.removeAttribute('auto-rotate'));")
    time.sleep(1.0)  # the frame in flight
    for _ in range(tries - 1):
        try:
            return browser.save_screenshot(str(path))
        except TimeoutException:
            time.sleep(10.0)
    return browser.save_screenshot(str(path))


@pytest.fixture(scope="module")
def served_site(tiny_site):
    """`http://127.0.0.1:PORT` serving the tiny gallery, with samples/node_modules linked in."""
    viewer = SAMPLES / "node_modules" / "@google" / "model-viewer"
    if not viewer.is_dir():
        missing("samples/node_modules is missing: run `npm ci` in samples/")
    link = tiny_site / "node_modules"
    if not link.exists():
        link.symlink_to(SAMPLES / "node_modules", target_is_directory=True)
    yield from serve(tiny_site)


def serve(directory: Path):
    """Serve `directory` on 127.0.0.1 for the duration of a fixture; yields the base URL."""

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=directory))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def open_and_wait(browser, url: str) -> dict:
    """Open `url` and poll until every viewer fired `load` or `error` (or the timeout passes)."""
    browser.get_log("browser")  # drop messages of earlier pages
    browser.get(url)
    started = time.monotonic()
    while True:
        status = browser.execute_script(STATUS_JS)
        waited = time.monotonic() - started
        settled = status["loaded_events"] + len(status["failed"]) >= status["viewers"]
        # Without its script model-viewer is never defined: no need to wait for the full timeout.
        if settled or waited > LOAD_TIMEOUT_S or (not status["upgraded"] and waited > UPGRADE_TIMEOUT_S):
            return status
        time.sleep(0.25)


@pytest.mark.slow
def test_every_model_viewer_of_the_gallery_loads_its_glb_offline(browser, served_site, tiny_site):
    glbs = sorted(p.relative_to(tiny_site).as_posix() for p in tiny_site.glob("*/*/mesh.glb"))
    assert len(glbs) == 6  # 3 prompts x 2 seeds
    status = open_and_wait(browser, f"{served_site}/index.html")
    sources = browser.execute_script(
        "return [...document.querySelectorAll('model-viewer')].map(v => v.getAttribute('src'));")
    assert sorted(sources) == glbs
    assert status["upgraded"], "model-viewer was never defined: its script did not load from node_modules"
    assert status["failed"] == [] and status["failed_figures"] == 0
    assert status["loaded_events"] == status["loaded_property"] == status["viewers"] == len(glbs)
    errors = [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == [], "the page logged errors (a failed request, e.g. to the network, or a script error)"
    time.sleep(1.0)  # let the loading bars fade before the picture
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert save_screenshot(browser, ARTIFACTS / "gallery.png")
    assert (ARTIFACTS / "gallery.png").stat().st_size > 10_000


@pytest.mark.slow
def test_a_model_viewer_whose_glb_is_missing_is_reported_as_failed(browser, served_site, tiny_site):
    page = (tiny_site / "index.html").read_text()
    first_glb = next(p.relative_to(tiny_site).as_posix() for p in sorted(tiny_site.glob("*/*/mesh.glb")))
    assert f'src="{first_glb}"' in page
    (tiny_site / "broken.html").write_text(page.replace(f'src="{first_glb}"', 'src="no_such_folder/mesh.glb"'))
    status = open_and_wait(browser, f"{served_site}/broken.html")
    assert status["failed"] == ["no_such_folder/mesh.glb"] and status["failed_figures"] == 1
    assert status["loaded_events"] == status["viewers"] - 1


@pytest.fixture(scope="module")
def served_samples():
    """`http://127.0.0.1:PORT` serving the committed samples/ folder itself."""
    if not (SAMPLES / "index.html").is_file():
        pytest.skip("samples/index.html has not been generated (python samples/make_gallery.py)")
    if not (SAMPLES / "node_modules" / "@google" / "model-viewer").is_dir():
        missing("samples/node_modules is missing: run `npm ci` in samples/")
    yield from serve(SAMPLES)


@pytest.mark.slow
def test_the_committed_gallery_page_loads_every_glb_offline(browser, served_samples):
    glbs = sorted(p.relative_to(SAMPLES).as_posix() for p in SAMPLES.glob("*/*/mesh.glb"))
    assert glbs, "samples/index.html exists but no sample GLB does"
    status = open_and_wait(browser, f"{served_samples}/index.html")
    sources = browser.execute_script(
        "return [...document.querySelectorAll('model-viewer')].map(v => v.getAttribute('src'));")
    assert sorted(sources) == glbs
    assert status["failed"] == [] and status["loaded_events"] == status["viewers"] == len(glbs)
    errors = [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []
    time.sleep(1.0)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert save_screenshot(browser, ARTIFACTS / "samples_gallery.png")
