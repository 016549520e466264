"""Regenerate the README's round-trip pictures: procedural objects encoded to a latent by a transmitter
and rendered back as STF turntables, all through the `shap-e` CLI.

    python samples/make_roundtrips.py [--model transmitter-small] [--out samples/roundtrip]
                                      [--size 128] [--views 20] [--device auto]

Each object is `shap_e.data.generate_asset(category, colour, seed=0)` in its canonical pose, written
as PLY, then `shap-e encode OBJECT.ply -o LATENT.pt --model MODEL` and `shap-e render LATENT.pt -o
<out>/<colour>_<category>.gif --model MODEL`. The same model and options always give the same GIFs.
"""
import argparse
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
    """Encode and render each (category, colour) object; returns the GIFs written to `out`."""
    from shap_e.cli import main as cli
    from shap_e.data import generate_asset

    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        for category, colour in objects:
            name = f"{colour}_{category}"
            mesh_path, latent_path = Path(tmp) / f"{name}.ply", Path(tmp) / f"{name}.pt"
            generate_asset(category, colour, seed=0).mesh.export(mesh_path)
            common = ["--model", model, "--device", device]
            if cli(["encode", str(mesh_path), "-o", str(latent_path), *common]) != 0:
                raise RuntimeError(f"shap-e encode failed for {name}")
            gif = out / f"{name}.gif"
            if cli(["render", str(latent_path), "-o", str(gif), "--size", str(size), "--views", str(views),
                    *common]) != 0:
                raise RuntimeError(f"shap-e render failed for {name}")
            written.append(gif)
    return written


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="transmitter-small", help="registry name of the transmitter")
    parser.add_argument("--out", type=Path, default=SITE / "roundtrip", help="folder of the GIFs")
    parser.add_argument("--size", type=int, default=128, help="frame size in pixels")
    parser.add_argument("--views", type=int, default=20, help="frames per turntable")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda", "mps"), default="auto")
    args = parser.parse_args(argv)
    for gif in make_roundtrips(args.model, args.out, args.size, args.views, args.device):
        print(f"wrote {gif}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
