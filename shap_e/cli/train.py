"""`shap-e train transmitter|text|image --config FILE`: train a stage (also under torchrun)."""
import os

from shap_e.cli.common import say


def add_commands(commands) -> None:
    train = commands.add_parser(
        "train", help="train a stage", description="Train a stage from a YAML config (see shap_e/train/run.py)."
    )
    train.add_argument("stage", choices=("transmitter", "text", "image"), help="which model to train")
    train.add_argument("--config", required=True, help="training config (YAML)")
    train.add_argument("--resume", action="store_true", help="continue from the run's checkpoint")
    train.add_argument("--init", help="start from these weights: a registry name (e.g. text300M) or a file")
    train.set_defaults(run=run_train)


def run_train(args) -> None:
    from shap_e.train.run import read_training_config, train_diffusion, train_transmitter

    config = read_training_config(args.config)
    if args.init:
        config["init"] = args.init
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch
        import torch.distributed as dist

        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if args.stage == "transmitter":
        path = train_transmitter(config, resume=args.resume)
    else:
        path = train_diffusion(args.stage, config, resume=args.resume)
    say(f"weights: {path}")
