"""How well does an image prior's own encoder read a shape from a picture, without the sampler?

    python -m bench.latent_probe_iou [--model image-small] [--split heldout_pairs] [-n 48]

An image prior with a latent head (`latent_head: true`, trained as the `latent_probe` of
`shap_e.train.diffusion_training.LatentProbeObjective`) regresses the object's latent from its
encoder's grid (`SplitVectorDiffusion.regress_latent`). This decodes that regression for `n` objects
of a split, each pictured as in `shap-e eval image` (`shap_e.eval.run.picture`), and scores the IoU
with the object (64^3, world frame, mesh grid 64, as the evaluation does). The regression is the
encoder's best single guess of the latent, so its IoU shows how much of the shape the encoder reads;
the prior's sampled meshes score against the same objects in `model_cards/results/`. Prints one
line per object and the mean.
"""
import argparse
from collections import defaultdict
from typing import List

import torch

from shap_e.data import iter_dataset
from shap_e.eval.metrics import to_eval_mesh, volumetric_iou
from shap_e.eval.run import asset_mesh, picture
from shap_e.models.download import load_model
from shap_e.util.notebooks import decode_latent_mesh


def probe_ious(model: str, decoder: str, split: str, n: int, seed: int) -> List[dict]:
    """One row `{category, iou}` per object of `iter_dataset(split, n, seed)`."""
    prior = load_model(model)
    xm = load_model(decoder)
    rows = []
    with torch.no_grad():
        for asset in iter_dataset(split, n, seed):
            latent = prior.regress_latent(1, {"images": [picture(asset)]})[0]  # [d_latent]
            mesh = to_eval_mesh(decode_latent_mesh(xm, latent, grid_size=64))
            rows.append(dict(category=asset.category, iou=volumetric_iou(mesh, asset_mesh(asset), 64)))
            print(f"{asset.category:10s} {rows[-1]['iou']:.3f}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="image-small", help="registry name of an image prior with a latent head")
    parser.add_argument("--decoder", default="transmitter-small", help="registry name of the decoder")
    parser.add_argument("--split", default="heldout_pairs", choices=["train", "heldout_pairs", "heldout_paraphrases"])
    parser.add_argument("-n", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = probe_ious(args.model, args.decoder, args.split, args.n, args.seed)
    by_category = defaultdict(list)
    for row in rows:
        by_category[row["category"]].append(row["iou"])
    print("by category:", ", ".join(f"{k} {sum(v) / len(v):.2f}" for k, v in sorted(by_category.items())))
    print(f"mean IoU over {len(rows)} ({args.split}, seed {args.seed}): {sum(r['iou'] for r in rows) / len(rows):.3f}")


if __name__ == "__main__":
    main()
