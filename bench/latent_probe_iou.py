"""How well does an image prior's own encoder read a shape from a picture, without the sampler?

    python -m bench.latent_probe_iou --checkpoint runs/small/image/checkpoint.pt [--split heldout_pairs] [-n 48]

An image prior trained with `latent_probe` (`shap_e.train.diffusion_training.LatentProbeObjective`)
keeps, in its training checkpoint, the MLP that regresses the object's latent from the encoder's
grid. This decodes that regression for `n` objects of a split, each pictured as in
`shap-e eval image` (`shap_e.eval.run.picture`), and scores the IoU with the object (64^3, world
frame, mesh grid 64, as the evaluation does). The regression is the encoder's best single guess of
the latent, so its IoU shows how much of the shape the encoder reads; the prior's sampled meshes
score against the same objects in `model_cards/eval_image_*`. Prints one line per object and the mean.
"""
import argparse
from collections import defaultdict
from typing import List

import torch

from shap_e.data import iter_dataset
from shap_e.diffusion.gaussian_diffusion import diffusion_from_config
from shap_e.eval.metrics import to_eval_mesh, volumetric_iou
from shap_e.eval.run import asset_mesh, picture
from shap_e.models.configs import model_from_config
from shap_e.models.download import load_config, load_model
from shap_e.train.diffusion_training import LatentProbeObjective
from shap_e.train.run import read_config
from shap_e.util.notebooks import decode_latent_mesh


def probe_ious(checkpoint: str, model_config: str, decoder: str, split: str, n: int, seed: int) -> List[dict]:
    """One row `{category, iou}` per object of `iter_dataset(split, n, seed)`."""
    prior = model_from_config(read_config(model_config))
    objective = LatentProbeObjective(prior, diffusion_from_config(load_config("diffusion-small")), 1.0)
    objective.load_state_dict(torch.load(checkpoint, map_location="cpu", weights_only=True)["model"])
    objective.eval()
    xm = load_model(decoder)
    rows = []
    with torch.no_grad():
        for asset in iter_dataset(split, n, seed):
            latent = objective.read_latent(prior.image_encoder.embed_images_grid([picture(asset)]))[0]  # [d_latent]
            mesh = to_eval_mesh(decode_latent_mesh(xm, latent, grid_size=64))
            rows.append(dict(category=asset.category, iou=volumetric_iou(mesh, asset_mesh(asset), 64)))
            print(f"{asset.category:10s} {rows[-1]['iou']:.3f}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="checkpoint.pt of a `shap-e train image` run with latent_probe")
    parser.add_argument("--model", default="shap_e/configs/image_small_config.yaml", help="the prior's model config (YAML file or registry name)")
    parser.add_argument("--decoder", default="transmitter-small", help="registry name of the decoder")
    parser.add_argument("--split", default="heldout_pairs", choices=["train", "heldout_pairs", "heldout_paraphrases"])
    parser.add_argument("-n", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = probe_ious(args.checkpoint, args.model, args.decoder, args.split, args.n, args.seed)
    by_category = defaultdict(list)
    for row in rows:
        by_category[row["category"]].append(row["iou"])
    print("by category:", ", ".join(f"{k} {sum(v) / len(v):.2f}" for k, v in sorted(by_category.items())))
    print(f"mean IoU over {len(rows)} ({args.split}, seed {args.seed}): {sum(r['iou'] for r in rows) / len(rows):.3f}")


if __name__ == "__main__":
    main()
