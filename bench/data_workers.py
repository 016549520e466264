"""How much faster do `data_workers` prepare a transmitter's training assets, and are the records the same?

    python -m bench.data_workers [--data runs/small/train] [-n 64] [--workers 1,2]

Prepares the encoder batches and supervision targets (`load_asset_records`, the recipe's
`point_candidates` and `targets` from `recipes/transmitter-small.yaml`) of the first `n` assets of a
dataset folder once per worker count, each time into a fresh cache, and prints the wall time of
each and whether every record equals the first count's tensor for tensor. Run it with one torch
thread in the calling process (`OMP_NUM_THREADS=1`, as the recipe does): with more, the one-process
records come from differently rounded kernels. When other work shares the cores, compare the rows of one run.
"""
import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import torch

from shap_e.models.configs import model_from_config
from shap_e.train.run import read_config
from shap_e.train.transmitter_training import AssetRecord, load_asset_records, mesh_files

ROOT = Path(__file__).resolve().parent.parent


def records_equal(a: List[AssetRecord], b: List[AssetRecord]) -> bool:
    """Every tensor of every record equal (encoder batch points and views, supervision targets)."""
    def tensors(record: AssetRecord) -> Dict[str, torch.Tensor]:
        out = {f"batch.{k}": v for k, v in vars(record.batch).items() if isinstance(v, torch.Tensor)}
        out.update({f"targets.{k}": v for k, v in vars(record.targets).items() if isinstance(v, torch.Tensor)})
        return out

    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        tx, ty = tensors(x), tensors(y)
        if tx.keys() != ty.keys() or not all(torch.equal(tx[k], ty[k]) for k in tx):
            return False
    return True


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="runs/small/train", help="dataset folder (from `shap-e dataset`)")
    parser.add_argument("-n", type=int, default=64, help="assets to prepare (the folder's first n)")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--recipe", default=str(ROOT / "recipes" / "transmitter-small.yaml"))
    args = parser.parse_args(argv)
    try:
        counts = [int(c) for c in args.workers.split(",")]
    except ValueError:
        parser.error(f"--workers must be comma-separated integers, got {args.workers!r}")
    if args.n < 1 or min(counts) < 1:
        parser.error("-n and every --workers count must be at least 1")
    recipe = read_config(args.recipe)
    encoder = model_from_config(read_config(str(ROOT / recipe["model"]))).encoder
    paths = mesh_files(args.data)[:args.n]
    print(f"{len(paths)} assets, torch threads {torch.get_num_threads()}")
    first = None
    for workers in counts:
        cache = Path(tempfile.mkdtemp(prefix=f"data_workers_{workers}_"))
        try:
            start = time.perf_counter()
            records, skipped = load_asset_records(
                paths, encoder, str(cache), 0, False, random_sample_count=recipe["point_candidates"],
                target_options=recipe["targets"], workers=workers,
            )
            seconds = time.perf_counter() - start
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        first = first if first is not None else records
        print(f"workers={workers}: {seconds:.1f} s ({seconds / len(paths):.2f} s/asset), skipped {len(skipped)}, "
              f"records equal to workers={counts[0]}: {records_equal(first, records)}", flush=True)


if __name__ == "__main__":
    main()
