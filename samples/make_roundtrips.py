"""Regenerate the README's round-trip pictures: procedural objects encoded to a latent by a transmitter
and rendered back as STF turntables, all through the `shap-e` CLI.

    python samples/make_roundtrips.py [--model transmitter-small] [--out samples/roundtrip]
                                      [--size 128] [--views 20] [--device auto]

Each object is `shap_e.data.generate_asset(category, colour, seed=0)` in its canonical pose, written
as PLY, then `shap-e encode OBJECT.ply -o LATENT.pt --model MODEL` and `shap-e render LATENT.pt -o
<out>/<colour>_<category>.gif --model MODEL`. The same model and options always give the same GIFs.
"""
import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

SITE = Path(__file__).resolve().parent
# (category, colour) of each picture, in the README's order.
OBJECTS: Tuple[Tuple[str, str], ...] = (("mushroom", "red"), ("torus", "green"), ("snowman", "white"),
                                        ("cone", "orange"))


def make_roundtrips(model: str, out: Path, size: int = 128, views: int = 20, device: str = "auto",
                    objects: Sequence[Tuple[str, str]] = OBJECTS) -> List[Path]:
    """Encode and render each (category, colour) object; returns the GIFs written to `out`.

    Every GIF is made in a temporary folder inside `out` first and moved into place only when all
    of them are made, so a failure (raised as RuntimeError, after the CLI has said why) leaves the
    GIFs already in `out` as they were."""
    from shap_e.cli import main as cli
    from shap_e.data import generate_asset

    out.mkdir(parents=True, exist_ok=True)
    made = []
    with tempfile.TemporaryDirectory(dir=out, prefix=".roundtrips.") as tmp:
        for category, colour in objects:
            name = f"{colour}_{category}"
            mesh_path, latent_path, gif = (Path(tmp) / f"{name}{suffix}" for suffix in (".ply", ".pt", ".gif"))
            generate_asset(category, colour, seed=0).mesh.export(mesh_path)
            common = ["--model", model, "--device", device]
            if cli(["encode", str(mesh_path), "-o", str(latent_path), *common]) != 0:
                raise RuntimeError(f"shap-e encode failed for {name}")
            if cli(["render", str(latent_path), "-o", str(gif), "--size", str(size), "--views", str(views),
                    *common]) != 0:
                raise RuntimeError(f"shap-e render failed for {name}")
            made.append(gif)
        written = [out / gif.name for gif in made]
        for gif, target in zip(made, written):
            os.replace(gif, target)
    return written


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="transmitter-small", help="registry name of the transmitter")
    parser.add_argument("--out", type=Path, default=SITE / "roundtrip", help="folder of the GIFs")
    parser.add_argument("--size", type=int, default=128, help="frame size in pixels")
    parser.add_argument("--views", type=int, default=20, help="frames per turntable")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda", "mps"), default="auto")
    args = parser.parse_args(argv)
    if args.size < 1 or args.views < 1:
        parser.error(f"--size and --views must be at least 1, got {args.size} and {args.views}")
    try:
        written = make_roundtrips(args.model, args.out, args.size, args.views, args.device)
    except RuntimeError as e:
        print(f"make_roundtrips: {e}; {args.out} is unchanged", file=sys.stderr)
        return 2
    for gif in written:
        print(f"wrote {gif}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
