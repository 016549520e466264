"""Write the gallery's `README.md` (table of turntable GIFs) and `index.html` (3D viewer) from disk.

A gallery is a folder of the site holding `gallery.json` (written by `make_gallery.py`) and one
sub-folder per sample with the CLI's `meta.json`, `mesh.glb` and `turntable.gif`. The pages list
every gallery found, so regenerating one gallery keeps the others. `index.html` loads
`@google/model-viewer` from the site's own `node_modules/` (installed by `npm ci`): nothing is
fetched from the network when it is viewed.
"""
import html
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional
from urllib.parse import quote

VIEWER_SCRIPT = "node_modules/@google/model-viewer/dist/model-viewer.min.js"


@dataclass
class Sample:
    """One generated object; paths are relative to the site folder (POSIX, URL-safe)."""

    prompt: str
    seed: int
    glb: str
    gif: Optional[str]
    seconds: Dict[str, float] = field(default_factory=dict)


@dataclass
class Gallery:
    """One folder of samples made by one model, with the record `make_gallery.py` left beside them."""

    folder: str
    record: Dict
    samples: List[Sample]


def read_gallery(site: Path, folder: Path) -> Gallery:
    """Read `folder/gallery.json` and its samples, ordered by prompt (as listed) then seed."""
    record = json.loads((folder / "gallery.json").read_text())
    order = {prompt: i for i, prompt in enumerate(record.get("prompts", []))}
    samples = []
    for meta_file in sorted(folder.glob("*/meta.json")):
        meta = json.loads(meta_file.read_text())
        base = meta_file.parent.relative_to(site).as_posix()
        gif = meta_file.parent / "turntable.gif"
        samples.append(Sample(
            prompt=meta["prompt"], seed=int(meta["seed"]), glb=quote(f"{base}/mesh.glb"),
            gif=quote(f"{base}/turntable.gif") if gif.is_file() else None, seconds=meta.get("seconds", {}),
        ))
    samples.sort(key=lambda s: (order.get(s.prompt, len(order)), s.prompt, s.seed))
    return Gallery(folder=folder.name, record=record, samples=samples)


def find_galleries(site: Path) -> List[Gallery]:
    """Every gallery folder directly inside `site`, by folder name."""
    folders = sorted(p.parent for p in site.glob("*/gallery.json") if not p.parent.name.startswith("."))
    return [read_gallery(site, folder) for folder in folders]


def _mean(values: List[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def timing_line(gallery: Gallery) -> str:
    """Total wall time and per-stage means, e.g. "total 80.2 s; sampling 5.1 s per prompt (4 seeds) ..."."""
    record, samples = gallery.record, gallery.samples
    # One CLI batch per prompt: every sample of a prompt carries the same batch sampling time.
    per_prompt = {s.prompt: s.seconds["sampling_batch"] for s in samples if "sampling_batch" in s.seconds}
    parts = [f"total {record.get('seconds_total', 0):.1f} s"]
    stages = (("sampling", list(per_prompt.values()), f"per prompt ({len(record.get('seeds', []))} seeds)"),
              ("mesh", [s.seconds["mesh"] for s in samples if "mesh" in s.seconds], "per sample"),
              ("turntable GIF", [s.seconds["turntable"] for s in samples if "turntable" in s.seconds],
               "per sample"))
    for name, values, unit in stages:
        mean = _mean(values)
        if mean is not None:
            parts.append(f"{name} {mean:.2f} s {unit}")
    return "; ".join(parts)


def _prompt_rows(gallery: Gallery) -> Dict[str, List[Sample]]:
    rows: Dict[str, List[Sample]] = {}
    for sample in gallery.samples:
        rows.setdefault(sample.prompt, []).append(sample)
    return rows


def _markdown_cell(sample: Sample) -> str:
    label = html.escape(f"{sample.prompt}, seed {sample.seed}")
    picture = f"![{label}]({sample.gif})" if sample.gif else "(no GIF)"
    return f"{picture}<br>[seed {sample.seed} GLB]({sample.glb})"


def gallery_markdown(gallery: Gallery) -> str:
    """One README section: which model, how it was made, timings, and a prompt x seed table."""
    record = gallery.record
    seeds = sorted({s.seed for s in gallery.samples})
    lines = [
        f"## `{record.get('model', gallery.folder)}` (folder `{gallery.folder}/`)", "",
        f"- made {record.get('date', '?')} on {record.get('machine', '?')}",
        f"- command: `{record.get('command', '?')}`",
        f"- which ran: `{record.get('cli_command', '?')}`",
        f"- timings: {timing_line(gallery)}", "",
        "| prompt | " + " | ".join(f"seed {s}" for s in seeds) + " |",
        "|---|" + "---|" * len(seeds),
    ]
    for prompt, samples in _prompt_rows(gallery).items():
        by_seed = {s.seed: s for s in samples}
        cells = [_markdown_cell(by_seed[s]) if s in by_seed else "" for s in seeds]
        lines.append(f"| {html.escape(prompt)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def readme_markdown(galleries: List[Gallery]) -> str:
    """The whole `samples/README.md`."""
    intro = """# Samples

Objects generated by `shap-e text` with `samples/make_gallery.py`. The default prompts are
"a {colour} {category}": one per category of the procedural training data, each of the 12 colours
once (category i with colour 5i mod 12, none of them a held-out pair); every prompt is drawn with
seeds 0, 1, 2, ... Each picture is a turntable GIF; its link is the GLB mesh.

## Viewing the meshes in 3D

`index.html` shows every GLB with `<model-viewer>`, loaded from `node_modules/` (no network needed):

```sh
cd samples && npm ci && python -m http.server 8000 --bind 127.0.0.1
# then open http://127.0.0.1:8000/
```

## Regenerating

```sh
python samples/make_gallery.py --model text-small --seeds 4   # + any `shap-e text` option, e.g. --steps 32
```

This rewrites the model's folder, then this README and `index.html`. When the official `text300M`
weights are cached (`shap-e download text300M`), the same run also regenerates `text300M/`.
"""
    sections = [gallery_markdown(g) for g in galleries] or ["No gallery has been generated yet.\n"]
    return intro + "\n" + "\n".join(sections)


def _figure(sample: Sample) -> str:
    caption = html.escape(f"{sample.prompt} · seed {sample.seed}")
    alt = html.escape(f"{sample.prompt}, seed {sample.seed}", quote=True)
    return (f'  <figure>\n    <model-viewer src="{sample.glb}" alt="{alt}" camera-controls auto-rotate '
            f'loading="eager"></model-viewer>\n    <figcaption>{caption} · <a href="{sample.glb}">GLB</a>'
            "</figcaption>\n  </figure>")


# Counts load/error events as they happen (before model-viewer upgrades the elements, so none is
# missed) and marks failed figures; `window.galleryStatus` also lets tests read the outcome.
STATUS_SCRIPT = """<script>
  window.galleryStatus = {loaded: 0, failed: []};
  for (const viewer of document.querySelectorAll("model-viewer")) {
    viewer.addEventListener("load", () => { window.galleryStatus.loaded += 1; });
    viewer.addEventListener("error", () => {
      window.galleryStatus.failed.push(viewer.getAttribute("src"));
      viewer.closest("figure").classList.add("failed");
    });
  }
</script>"""

STYLE = """<style>
  body { font-family: sans-serif; margin: 1em; background: #fafafa; }
  .grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(200px, 1fr)); gap: 0.5em; }
  figure { margin: 0; background: #fff; border: 1px solid #ddd; }
  figure.failed { border-color: #c00; }
  figure.failed figcaption::after { content: " (could not load)"; color: #c00; }
  model-viewer { width: 100%; height: 200px; }
  figcaption { font-size: 0.85em; padding: 0.3em; }
</style>"""


def index_html(galleries: List[Gallery]) -> str:
    """The whole `samples/index.html`: one section per gallery, one `<model-viewer>` per GLB."""
    sections = []
    for gallery in galleries:
        model = html.escape(str(gallery.record.get("model", gallery.folder)))
        figures = "\n".join(_figure(s) for s in gallery.samples)
        sections.append(f'<h2>{model}</h2>\n<div class="grid">\n{figures}\n</div>')
    body = "\n".join(sections) or "<p>No gallery has been generated yet: run samples/make_gallery.py.</p>"
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Shap-E samples</title>
<link rel="icon" href="data:,">
<script type="module" src="{VIEWER_SCRIPT}"></script>
{STYLE}
</head>
<body>
<h1>Shap-E samples</h1>
<p>Drag to turn a model. The turntable GIFs and the commands are in <a href="README.md">README.md</a>.</p>
{body}
{STATUS_SCRIPT}
</body>
</html>
"""


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path`."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; the pages are meant to be served and read
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_site(site: Path) -> List[Gallery]:
    """Rewrite `site/README.md` and `site/index.html` from the galleries on disk; returns them."""
    galleries = find_galleries(site)
    write_text_atomic(site / "README.md", readme_markdown(galleries))
    write_text_atomic(site / "index.html", index_html(galleries))
    return galleries
