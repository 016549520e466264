"""Regenerate the samples gallery: GLBs + turntable GIFs from the `shap-e text` CLI, then the pages.

    python samples/make_gallery.py [--model text-small] [--seeds 4] [--out samples/text-small]
                                   [--prompts FILE] [--max-faces 2000] [--keep-latents]
                                   [--no-official] [shap-e text options ...]

Options this script does not know (``--steps 2 --grid-size 32 --device cuda`` ...) go to
``shap-e text`` unchanged. Every prompt gets seeds ``0 .. seeds-1`` (one CLI batch per prompt, the
model loaded once). The meshes are decimated to ``--max-faces`` and the latents deleted unless
``--keep-latents``: the gallery lives in git. When the official ``text300M`` weights and one of its
decoders are cached, the same prompts also make ``<site>/text300M``. Finally ``README.md`` and
``index.html`` of the site folder are rewritten from every gallery on disk (see ``gallery_site.py``).
"""
import argparse
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch

SITE = Path(__file__).resolve().parent
if str(SITE) not in sys.path:  # run as a script, samples/ is already there; imported, it may not be
    sys.path.insert(0, str(SITE))
import gallery_site  # noqa: E402  (a sibling file: samples/ is a folder of scripts, not a package)

OFFICIAL = "text300M"
# Pairing category i with colour 5i mod 12 (5 is coprime to 12) uses every colour once, mixes them
# far from the list order, and happens to avoid every held-out (category, colour) training pair.
COLOUR_STRIDE = 5
# Faces per GLB (`shap-e text --max-faces`): about 40 KB a GLB with its vertex colours, so that the
# 48 GLBs of the default gallery take about 2 MB of the repository.
MAX_FACES = 2000


def default_prompts() -> List[str]:
    """The 12 prompts "a {colour} {category}": every category and every colour of `shap_e.data` once."""
    from shap_e.data import CATEGORIES, COLOURS

    colours = list(COLOURS)
    prompts = []
    for i, category in enumerate(CATEGORIES):
        colour = colours[(COLOUR_STRIDE * i) % len(colours)]
        article = "an" if colour[0] in "aeiou" else "a"
        prompts.append(f"{article} {colour} {category}")
    return prompts


def read_prompt_file(path: Path) -> List[str]:
    """One prompt a line; blank lines are skipped."""
    if not path.is_file():
        raise ValueError(f"--prompts {str(path)!r} does not exist; pass a text file with one prompt a line")
    prompts = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    if not prompts:
        raise ValueError(f"--prompts {str(path)!r} has no prompts; write one prompt a line")
    return prompts


def official_available(cache_dir: Optional[str]) -> bool:
    """Whether `text300M` and one of its decoders are cached (so no download would start)."""
    from shap_e.models.download import weights_cached
    from shap_e.models.registry import MODELS

    if OFFICIAL not in MODELS or not weights_cached(OFFICIAL, cache_dir):
        return False
    return any(weights_cached(d, cache_dir) for d in MODELS[OFFICIAL].decoders)


def cli_arguments(model: str, prompts_file: Path, out: Path, seeds: int, extra: Sequence[str],
                  max_faces: int = MAX_FACES) -> List[str]:
    """The `shap-e` argv that writes one GLB (at most `max_faces` faces) + GIF per (prompt, seed) into `out`."""
    return ["text", "--prompts", str(prompts_file), "--model", model, "-o", str(out), "--batch", str(seeds),
            "--seed", "0", "--format", "glb", "--gif", "--max-faces", str(max_faces), *extra]


def make_gallery(model: str, out: Path, prompts: Sequence[str], seeds: int, extra: Sequence[str],
                 command: str, max_faces: int = MAX_FACES, keep_latents: bool = False) -> Dict:
    """Generate one gallery into `out` (replacing it only when every sample succeeded).

    Writes ``out/<slug>_seed<k>/{mesh.glb, turntable.gif, meta.json}`` (and ``latent.pt`` with
    `keep_latents`), ``out/prompts.txt`` and ``out/gallery.json`` (model, commands, prompts, seeds,
    hardware, timings); returns that record.
    """
    from shap_e.cli import main as shap_e_main

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes 0700; the gallery is meant to be served and read
        (tmp / "prompts.txt").write_text("".join(p + "\n" for p in prompts))
        argv = cli_arguments(model, tmp / "prompts.txt", tmp, seeds, extra, max_faces)
        started = time.perf_counter()
        status = shap_e_main(argv)
        if status != 0:
            raise RuntimeError(f"`shap-e {shlex.join(argv)}` failed with status {status} (its error is above)")
        seconds = round(time.perf_counter() - started, 1)
        if not keep_latents:
            for latent in tmp.glob("*/latent.pt"):
                latent.unlink()
        record = {
            "model": model, "prompts": list(prompts), "seeds": list(range(seeds)),
            "command": command,
            "cli_command": "shap-e " + shlex.join(cli_arguments(model, Path(out.name) / "prompts.txt",
                                                                 Path(out.name), seeds, extra, max_faces)),
            "seconds_total": seconds,
            "hardware": hardware_description(),
        }
        (tmp / "gallery.json").write_text(json.dumps(record, indent=2) + "\n")
        replace_directory(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return record


def hardware_description() -> str:
    """Where the timings are measured, e.g. "2-core AMD EPYC, 1 thread, torch 2.13.0+cpu"."""
    if torch.cuda.is_available():
        where = torch.cuda.get_device_name(0)
    else:
        threads = torch.get_num_threads()
        where = f"{os.cpu_count()}-core {cpu_name()}, {threads} thread{'s' if threads > 1 else ''}"
    return f"{where}, torch {torch.__version__}"


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else its architecture."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            return next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        return f"{platform.machine()} CPU"


def replace_directory(new: Path, final: Path) -> None:
    """Put the finished folder `new` at `final`; an old `final` is moved aside first, then deleted."""
    old = None
    if final.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old.", dir=final.parent))
        os.replace(final, old / final.name)
    os.replace(new, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def parse_arguments(argv: Optional[Sequence[str]]):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], allow_abbrev=False,
        epilog="Any other option goes to `shap-e text` unchanged (see `shap-e text --help`).",
    )
    parser.add_argument("--model", default="text-small", help="registry name of the text prior")
    parser.add_argument("--seeds", type=int, default=4, help="seeds per prompt (0 .. seeds-1)")
    parser.add_argument("--out", help="gallery folder inside the site (default: <site>/<model>)")
    parser.add_argument("--site", default=str(SITE), help="folder of README.md and index.html (default: samples/)")
    parser.add_argument("--prompts", help="a file with one prompt a line (default: 12 category/colour prompts)")
    parser.add_argument("--max-faces", type=int, default=MAX_FACES,
                        help=f"at most this many faces per GLB (default: {MAX_FACES}; `shap-e text --max-faces`)")
    parser.add_argument("--keep-latents", action="store_true",
                        help="keep each sample's latent.pt (default: deleted; the repository does not track them)")
    parser.add_argument("--no-official", action="store_true", help=f"skip {OFFICIAL} even when it is cached")
    parser.add_argument("--cache-dir", help="model cache (default: $SHAP_E_CACHE or ~/.cache/shap_e)")
    args, extra = parser.parse_known_args(argv)
    if args.seeds < 1:
        raise ValueError(f"--seeds {args.seeds}: pass at least 1")
    site = Path(args.site).resolve()
    out = Path(args.out).resolve() if args.out else site / args.model
    if out.parent != site:
        raise ValueError(f"--out {args.out!r} must be a folder directly inside the site {str(site)!r}")
    if args.cache_dir:
        extra += ["--cache-dir", args.cache_dir]
    return args, site, out, extra


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Make the gallery (and the official one when cached), then rewrite README.md and index.html."""
    args, site, out, extra = parse_arguments(argv)
    prompts = read_prompt_file(Path(args.prompts)) if args.prompts else default_prompts()
    command = "python samples/make_gallery.py " + shlex.join(list(argv if argv is not None else sys.argv[1:]))
    make_gallery(args.model, out, prompts, args.seeds, extra, command.strip(), args.max_faces, args.keep_latents)
    if not args.no_official and args.model != OFFICIAL and official_available(args.cache_dir):
        make_gallery(OFFICIAL, site / OFFICIAL, prompts, args.seeds, extra,
                     f"{command.strip()} (official gallery, same prompts and options)", args.max_faces,
                     args.keep_latents)
    gallery_site.write_site(site)
    print(f"wrote {site / 'README.md'} and {site / 'index.html'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, RuntimeError) as error:
        print(f"make_gallery: error: {error}", file=sys.stderr)
        sys.exit(2)
