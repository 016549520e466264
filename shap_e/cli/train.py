"""`shap-e train transmitter|text|image --config FILE`: train a stage (also under torchrun)."""
from shap_e.cli.common import CliError, say


def add_commands(commands) -> None:
    train = commands.add_parser(
        "train", help="train a stage", description="Train a stage from a YAML config (see shap_e/train/run.py)."
    )
    train.add_argument("stage", choices=("transmitter", "text", "image"), help="which model to train")
    train.add_argument("--config", required=True, help="training config (YAML)")
    train.add_argument("--resume", action="store_true", help="continue from the run's checkpoint")
    train.add_argument("--init", help="start from these weights: a registry name (e.g. text300M) or a file")
    train.add_argument("--prepare-only", action="store_true",
                       help="transmitter: build the encoder batches and supervision into the config's cache_dir "
                            "and stop (no init weights needed; the training run then reads them from the cache)")
    train.add_argument("--data-workers", type=int,
                       help="transmitter: processes that prepare the assets, instead of the config's data_workers "
                            "(the records do not depend on it)")
    train.add_argument("--forward-threads", type=int,
                       help="torch threads of each step's forward pass, instead of the config's "
                            "train.forward_threads; the backward pass keeps OMP_NUM_THREADS (see shap_e/train/loop.py)")
    train.add_argument("--stop-at", type=int, metavar="STEP",
                       help="stop after this step with a checkpoint (the schedule still spans the config's steps); "
                            "`--resume` continues the run, e.g. with other --forward-threads")
    train.set_defaults(run=run_train)


def run_train(args) -> None:
    from shap_e.train.run import prepare_transmitter_data, read_training_config, train_diffusion, train_transmitter
    from shap_e.util.distributed import process_group

    if args.stage != "transmitter" and (args.prepare_only or args.data_workers is not None):
        raise CliError(f"--prepare-only and --data-workers are for the transmitter stage, not {args.stage!r}")
    if args.data_workers is not None and args.data_workers < 1:
        raise CliError(f"--data-workers must be at least 1, got {args.data_workers}")
    if args.forward_threads is not None and args.forward_threads < 1:
        raise CliError(f"--forward-threads must be at least 1, got {args.forward_threads}")
    if args.stop_at is not None and args.stop_at < 1:
        raise CliError(f"--stop-at must be at least 1, got {args.stop_at}")
    if args.prepare_only and (args.resume or args.stop_at is not None):
        raise CliError("--prepare-only trains nothing: leave out --resume and --stop-at")
    config = read_training_config(args.config)
    if args.data_workers is not None:
        config["data_workers"] = args.data_workers
    if args.prepare_only:
        prepared, skipped = prepare_transmitter_data(config)
        say(f"prepared {prepared} assets in {config['cache_dir']} ({skipped} skipped)")
        return
    if args.init:
        config["init"] = args.init
    if args.forward_threads is not None:
        config["train"] = dict(config.get("train") or {}, forward_threads=args.forward_threads)
    with process_group():
        if args.stage == "transmitter":
            path = train_transmitter(config, resume=args.resume, stop_at=args.stop_at)
        else:
            path = train_diffusion(args.stage, config, resume=args.resume, stop_at=args.stop_at)
    if path is None:
        say(f"stopped (--stop-at {args.stop_at}) with a checkpoint before the last step: continue with --resume")
    else:
        say(f"weights: {path}")
