"""samples/make_gallery.py and samples/gallery_site.py: prompts, files, pages, atomic replacement."""
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from shap_e.data import CATEGORIES, COLOURS
from shap_e.data.procedural import HELDOUT_PAIRS
from shap_e.models import registry

TINY_SAMPLES = {f"{slug}_seed{seed}" for slug in ("a_red_cube", "a_purple_sphere", "a_gray_cylinder")
                for seed in (0, 1)}


class ViewerSources(HTMLParser):
    """Collects the `src` of every <model-viewer> and <script> of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.viewers, self.scripts = [], []

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "model-viewer":
            self.viewers.append(dict(attrs)["src"])
        elif tag == "script" and dict(attrs).get("src"):
            self.scripts.append(dict(attrs)["src"])


def page_sources(page: Path) -> ViewerSources:
    parser = ViewerSources()
    parser.feed(page.read_text())
    return parser


@pytest.fixture
def stand_ins_in_process(tiny_models, monkeypatch, tmp_path):
    """Register the stand-ins in this process (on a copy of the registry, restored afterwards)."""
    monkeypatch.setattr(registry, "MODELS", dict(registry.MODELS))
    registry.register_from_file(tiny_models / "registry.yaml")
    monkeypatch.setenv("SHAP_E_CLIP", str(tiny_models / "clip"))
    monkeypatch.setenv("SHAP_E_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_default_prompts_name_every_category_and_every_colour_exactly_once(gallery_script):
    prompts = gallery_script.default_prompts()
    pairs = [tuple(re.fullmatch(r"an? (\w+) (\w+)", p).groups()) for p in prompts]
    assert sorted(category for _, category in pairs) == sorted(CATEGORIES)
    assert sorted(colour for colour, _ in pairs) == sorted(COLOURS)
    assert not {(category, colour) for colour, category in pairs} & set(HELDOUT_PAIRS)
    assert prompts[:3] == ["a red cube", "a purple sphere", "a gray cylinder"]
    assert "an orange chair" in prompts


def test_script_writes_a_light_glb_gif_and_meta_per_prompt_and_seed_and_no_latent(tiny_site):
    gallery = tiny_site / "text-small"
    assert {p.name for p in gallery.iterdir() if p.is_dir()} == TINY_SAMPLES
    for name in TINY_SAMPLES:
        assert (gallery / name / "mesh.glb").read_bytes()[:4] == b"glTF"
        assert (gallery / name / "turntable.gif").read_bytes()[:6] == b"GIF89a"
        assert json.loads((gallery / name / "meta.json").read_text())["max_faces"] == 100
        assert not (gallery / name / "latent.pt").exists()  # the repository tracks no latents
    record = json.loads((gallery / "gallery.json").read_text())
    assert record["model"] == "text-small" and record["seeds"] == [0, 1]
    assert record["prompts"] == (gallery / "prompts.txt").read_text().splitlines()
    assert record["cli_command"].startswith("shap-e text --prompts text-small/prompts.txt --model text-small")
    assert "--max-faces 100" in record["cli_command"] and "thread" in record["hardware"]
    assert record["seconds_total"] > 0
    assert not [p for p in tiny_site.iterdir() if p.name.startswith(".")], "a temporary folder was left"


def test_readme_table_shows_every_gif_and_links_every_glb(tiny_site):
    readme = (tiny_site / "README.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", readme)
    gifs = {link for link in links if link.endswith(".gif")}
    glbs = {link for link in links if link.endswith(".glb")}
    assert gifs == {f"text-small/{name}/turntable.gif" for name in TINY_SAMPLES}
    assert glbs == {f"text-small/{name}/mesh.glb" for name in TINY_SAMPLES}
    assert "| a red cube | ![a red cube, seed 0](text-small/a_red_cube_seed0/turntable.gif)" in readme
    assert re.search(r"timings: total [0-9.]+ s; sampling [0-9.]+ s per sample; mesh [0-9.]+ s per sample", readme)
    assert re.search(r"hardware: [0-9]+-core .+, [0-9]+ threads?, torch ", readme)


def test_index_page_has_one_model_viewer_per_glb_and_a_local_viewer_script(tiny_site):
    sources = page_sources(tiny_site / "index.html")
    assert sorted(sources.viewers) == sorted(f"text-small/{name}/mesh.glb" for name in TINY_SAMPLES)
    assert sources.scripts == ["node_modules/@google/model-viewer/dist/model-viewer.min.js"]
    assert "http" not in (tiny_site / "index.html").read_text(), "the page must not reach the network"


def test_pages_list_every_gallery_folder_of_the_site(tiny_site, gallery_script, tmp_path):
    site = tmp_path / "site"
    shutil.copytree(tiny_site / "text-small", site / "text-small")
    shutil.copytree(tiny_site / "text-small", site / "text300M")
    record = json.loads((site / "text300M" / "gallery.json").read_text())
    (site / "text300M" / "gallery.json").write_text(json.dumps({**record, "model": "text300M"}))
    galleries = gallery_script.gallery_site.write_site(site)
    assert [g.record["model"] for g in galleries] == ["text-small", "text300M"]
    assert len(page_sources(site / "index.html").viewers) == 2 * len(TINY_SAMPLES)
    assert "## `text300M` (folder `text300M/`)" in (site / "README.md").read_text()


def test_regenerating_replaces_the_old_samples(tiny_site, gallery_script, stand_ins_in_process, tmp_path):
    site = tmp_path / "site"
    shutil.copytree(tiny_site / "text-small", site / "text-small")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a green cone\n")
    argv = ["--site", str(site), "--prompts", str(prompts), "--seeds", "1", "--steps", "2", "--grid-size", "8",
            "--render-size", "8", "--device", "cpu", "--no-official", "--keep-latents"]
    assert gallery_script.main(argv) == 0
    assert {p.name for p in (site / "text-small").iterdir() if p.is_dir()} == {"a_green_cone_seed0"}
    assert (site / "text-small/a_green_cone_seed0/latent.pt").is_file()  # kept on request
    record = json.loads((site / "text-small/gallery.json").read_text())
    assert f"--max-faces {gallery_script.MAX_FACES}" in record["cli_command"]  # the default budget
    assert page_sources(site / "index.html").viewers == ["text-small/a_green_cone_seed0/mesh.glb"]
    assert sorted(p.name for p in site.iterdir()) == ["README.md", "index.html", "text-small"]


def test_a_failed_run_keeps_the_old_gallery_and_leaves_no_temporary_folder(tiny_site, gallery_script, tmp_path):
    out = tmp_path / "site" / "text-small"
    shutil.copytree(tiny_site / "text-small", out)
    with pytest.raises(RuntimeError, match="failed with status 2"):
        gallery_script.make_gallery("no-such-model", out, ["a red cube"], 1, [], "test")
    assert {p.name for p in out.iterdir() if p.is_dir()} == TINY_SAMPLES
    assert [p.name for p in out.parent.iterdir()] == ["text-small"]


def test_official_gallery_is_made_only_when_its_weights_are_cached(gallery_script, monkeypatch, tmp_path):
    from shap_e.models import download

    cache = tmp_path / "cache"
    cache.mkdir()
    assert not gallery_script.official_available(str(cache))
    # The official weights cannot be downloaded here: the cache says which names it holds.
    held = {"text300M"}
    monkeypatch.setattr(download, "weights_cached", lambda name, cache_dir=None: name in held)
    assert not gallery_script.official_available(str(cache))  # a prior without a decoder does not do
    held.add("transmitter")
    assert gallery_script.official_available(str(cache))
    made = []
    monkeypatch.setattr(gallery_script, "make_gallery", lambda model, out, *args: made.append((model, out.name)))
    monkeypatch.setattr(gallery_script.gallery_site, "write_site", lambda site: [])
    site = ["--site", str(tmp_path), "--cache-dir", str(cache)]
    assert gallery_script.main(site) == 0
    assert made == [("text-small", "text-small"), ("text300M", "text300M")]
    made.clear()
    assert gallery_script.main(site + ["--no-official"]) == 0
    assert made == [("text-small", "text-small")]


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "0"], "--seeds 0: pass at least 1"),
    (["--out", "/elsewhere/gallery"], "must be a folder directly inside the site"),
    (["--prompts", "no_such_file.txt"], "does not exist"),
])
def test_bad_arguments_raise_a_value_error_naming_the_option(gallery_script, argv, message, tmp_path):
    with pytest.raises(ValueError, match=re.escape(message)):
        gallery_script.main(["--site", str(tmp_path), *argv])
