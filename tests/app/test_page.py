"""The page in headless Chromium: type a prompt, press Generate, and the 3D viewer draws the GLB.

Uses the gallery test's browser (SwiftShader WebGL, no DNS but 127.0.0.1, so a page that needed
the network would fail); skipped where Chromium, chromedriver or selenium are missing unless
$SHAP_E_REQUIRE_BROWSER=1. The screenshot goes to $SHAP_E_ARTIFACTS (default `test-artifacts/`)
as `app.png`.
"""
import io
import time

import numpy as np
import pytest
from PIL import Image

from tests.gallery.test_gallery_page import ARTIFACTS, browser, save_screenshot  # noqa: F401 (a fixture)

GENERATE_TIMEOUT_S = 300
DRAWN_FRACTION = 0.01  # of the viewer's pixels away from its white background


def drawn_fraction(png: bytes) -> float:
    """The fraction of pixels farther than 40 (of 255, summed over RGB) from white."""
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    return float(((255 - pixels).sum(axis=-1) > 40).mean())


def wait_for_drawn_viewer(browser, viewer: str) -> float:
    """Poll until the viewer's canvas shows the model; returns the drawn fraction (0 on timeout)."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + GENERATE_TIMEOUT_S
    while time.monotonic() < deadline:
        canvases = browser.find_elements(By.CSS_SELECTOR, f"#{viewer} canvas")
        if canvases and canvases[0].size["width"] > 0:
            fraction = drawn_fraction(canvases[0].screenshot_as_png)
            if fraction > DRAWN_FRACTION:
                return fraction
        time.sleep(1.0)
    return 0.0


def test_a_blank_viewer_counts_as_nothing_drawn():
    def png(pixels) -> bytes:
        out = io.BytesIO()
        Image.fromarray(np.asarray(pixels, np.uint8)).save(out, format="PNG")
        return out.getvalue()

    white = np.full((40, 60, 3), 255)
    assert drawn_fraction(png(white)) == 0.0 < DRAWN_FRACTION
    white[:, :30] = (200, 30, 30)
    assert drawn_fraction(png(white)) == 0.5


@pytest.mark.slow
def test_typing_a_prompt_and_pressing_generate_draws_the_glb_in_the_viewer(browser, app_server):  # noqa: F811
    from selenium.webdriver.common.by import By

    browser.get(app_server.url)
    deadline = time.monotonic() + 60
    while not browser.find_elements(By.CSS_SELECTOR, "#text-prompt textarea"):
        assert time.monotonic() < deadline, "the page never showed its prompt box"
        time.sleep(0.25)
    assert not browser.find_elements(By.CSS_SELECTOR, "#text-viewer canvas")  # nothing drawn before the job
    browser.find_element(By.CSS_SELECTOR, "#text-prompt textarea").send_keys("a red cube")
    browser.find_element(By.CSS_SELECTOR, "#text-run").click()
    fraction = wait_for_drawn_viewer(browser, "text-viewer")
    assert fraction > DRAWN_FRACTION, f"the viewer showed nothing within {GENERATE_TIMEOUT_S} s"
    link = browser.find_element(By.CSS_SELECTOR, "#text-viewer a[data-testid='model3d-download-link']")
    assert link.get_attribute("href").endswith("mesh.glb")
    assert "1 sample in" in browser.find_element(By.CSS_SELECTOR, "#text-status").text
    failed = [e["message"] for e in browser.get_log("browser") if "Failed to load resource" in e["message"]]
    assert failed == [], "the page asked for something it could not load (e.g. from the network)"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert save_screenshot(browser, ARTIFACTS / "app.png")
