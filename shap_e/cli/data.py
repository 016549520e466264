"""`shap-e dataset` (write the procedural dataset) and `shap-e latents` (encode it for a prior)."""
from pathlib import Path

from shap_e.cli.common import CliError, say
from shap_e.util.checks import check_int
from shap_e.util.memory import check_disk_space

MAX_ASSETS = 999_999  # the files are numbered with six digits
ASSET_BYTES = 24_000  # a procedural asset's PLY is about 19 kB


def add_commands(commands) -> None:
    dataset = commands.add_parser(
        "dataset", help="write the procedural training data",
        description="Write N procedural assets (PLY) and captions.jsonl into a folder (see shap_e.data).",
    )
    dataset.add_argument("out", help="output folder")
    dataset.add_argument("--n", type=int, required=True, help="number of assets")
    dataset.add_argument("--split", default="train", help="train, heldout_pairs or heldout_paraphrases")
    dataset.add_argument("--seed", type=int, default=0)
    dataset.add_argument("--random-yaw", action="store_true",
                         help="turn each object by a random angle about +Z (default: canonical pose)")
    dataset.set_defaults(run=run_dataset)

    latents = commands.add_parser(
        "latents", help="encode a dataset for prior training",
        description="Encode a dataset folder with a transmitter and pair the latents with captions or renders.",
    )
    latents.add_argument("data", help="dataset folder (from `shap-e dataset`)")
    latents.add_argument("-o", "--out", required=True, help="output .safetensors file")
    latents.add_argument("--stage", choices=("text", "image"), required=True, help="conditions to pair with")
    latents.add_argument("--transmitter", required=True,
                         help="a registry name (encodes with its registered weights) or a transmitter YAML config")
    latents.add_argument("--weights", help="weights file: required with a YAML --transmitter, optional with a name")
    latents.add_argument("--per-asset", type=int, default=4, help="captions or renders per asset")
    latents.add_argument("--image-size", type=int, default=64, help="render size for --stage image")
    latents.add_argument("--seed", type=int, default=0)
    latents.add_argument("--refine-steps", type=int, default=0,
                         help="refine each latent against its asset for this many steps (0: off; recipe: 400)")
    latents.add_argument("--cache-dir",
                         help="the cache of transmitter training: encoder batches (the recipe's stage 1 made those "
                              "of --seed 0) and the supervision --refine-steps reuses")
    latents.add_argument("--workers", type=int, default=1,
                         help="--refine-steps: processes that compute the supervision side by side (the result "
                              "does not depend on it; 2 on a 2-core machine)")
    latents.add_argument("--text-tokens", type=int, default=0,
                         help="--stage text: store each caption's first N MiniLM token states, for a prior with "
                              "conditioner minilm_tokens and grid_tokens N (0: one pooled embedding; recipe: 24)")
    latents.add_argument("--captions", choices=("train", "augmented", "extended"), default="train",
                         help="--stage text: draw the extra captions from the training templates and synonyms, "
                              "or from those plus more (augmented), or from those plus 18 more colour words per "
                              "colour (extended); never a held-out word")
    latents.add_argument("--partial-captions", type=float, default=0.0, metavar="SHARE",
                         help="--stage text: this share of the extra captions names only the category (\"a tall "
                              "lamp\") or only the colour (\"a white object\"), half each: attribute dropout "
                              "(default 0)")
    latents.add_argument("--text-layers", metavar="I,J",
                         help="--stage text: read the captions from these MiniLM hidden states, concatenated "
                              "(0: the embedding layer, 6: the last), for a prior whose config says text_layers: "
                              "[I, J] (default: the last layer)")
    latents.set_defaults(run=run_latents)


def run_dataset(args) -> None:
    from shap_e.data import SPLITS, write_dataset

    check_int(args.n, "--n", 1, MAX_ASSETS)
    check_disk_space(args.out, args.n * ASSET_BYTES, f"--n {args.n}", "write fewer assets or free some space")
    check_int(args.seed, "--seed", 0, 2**63 - 1)
    if args.split not in SPLITS:
        raise CliError(f"--split {args.split!r} is unknown; valid: {', '.join(SPLITS)}")
    path = write_dataset(args.out, args.n, seed=args.seed, split=args.split, random_yaw=args.random_yaw)
    say(f"wrote {args.n} assets and {path}")


def run_latents(args) -> None:
    from shap_e.models.sentence_encoder import SentenceEncoder
    from shap_e.train.latents import build_latent_dataset
    from shap_e.train.run import build_model, is_config_file, training_device

    check_int(args.refine_steps, "--refine-steps", 0, 100_000)
    check_int(args.workers, "--workers", 1, 256)
    check_int(args.per_asset, "--per-asset", 1, 1000)
    check_int(args.image_size, "--image-size", 8, 1024)
    check_int(args.seed, "--seed", 0, 2**63 - 1)
    check_int(args.text_tokens, "--text-tokens", 0, 512)
    if args.text_tokens < 0 or (args.text_tokens and args.stage != "text"):
        raise CliError(f"--text-tokens {args.text_tokens}: give a positive count with --stage text, or leave it out")
    if not 0.0 <= args.partial_captions <= 1.0 or (args.partial_captions and args.stage != "text"):  # NaN too
        raise CliError(f"--partial-captions {args.partial_captions}: give a share between 0 and 1 with --stage text, "
                       "or leave it out")
    text_layers = None
    if args.text_layers is not None:
        if args.stage != "text":
            raise CliError("--text-layers picks MiniLM's hidden states: give it with --stage text, or leave it out")
        try:
            text_layers = [int(i) for i in args.text_layers.split(",")]
            SentenceEncoder.from_package(layers=text_layers)  # checks the indices; loads nothing yet
        except ValueError as e:
            raise CliError(f"--text-layers {args.text_layers}: give distinct MiniLM hidden-state indices separated "
                           f"by commas, such as 0,6 ({e})") from e
    if args.weights is None and is_config_file(args.transmitter):
        raise CliError(f"--transmitter {args.transmitter} is a config without weights: pass its trained weights "
                       "with --weights (an untrained transmitter encodes meaningless latents)")
    # A registry name without --weights loads the registered weights (build_model's init == name).
    weights = args.weights or args.transmitter
    model = build_model(args.transmitter, weights, training_device())
    dataset = build_latent_dataset(
        model, args.data, args.stage, per_asset=args.per_asset, seed=args.seed, image_size=args.image_size,
        refine_steps=args.refine_steps, cache_dir=args.cache_dir, text_tokens=args.text_tokens,
        caption_vocabulary=args.captions, workers=args.workers, partial_captions=args.partial_captions,
        text_layers=text_layers,
    )
    dataset.provenance.update(data=str(args.data), transmitter=args.transmitter, weights=str(weights))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    dataset.save(out)
    say(f"wrote {len(dataset.latents)} latent/condition pairs to {out}")
