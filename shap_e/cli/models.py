"""`shap-e models` (the registry) and `shap-e download NAME` (fetch weights into the cache)."""
from shap_e.cli.common import CliError, say


def add_commands(commands) -> None:
    models = commands.add_parser("models", help="list the model registry", description="List known models.")
    models.add_argument("--cache-dir", help="model cache")
    models.set_defaults(run=run_models)
    download = commands.add_parser("download", help="fetch official weights", description="Download weights.")
    download.add_argument("names", nargs="+", help="registry names, e.g. text300M transmitter")
    download.add_argument("--cache-dir", help="model cache")
    download.add_argument("--redownload", action="store_true", help="replace a cached file whose hash is wrong")
    download.set_defaults(run=run_download)


def run_models(args) -> None:
    from shap_e.models.download import default_cache_dir, weights_cached
    from shap_e.models.registry import MODELS

    cache = args.cache_dir or default_cache_dir()
    print(f"{'name':<16} {'parameters':>10}  {'cached':<7}  description")
    for name, spec in sorted(MODELS.items()):
        params = f"{spec.n_params / 1e6:.1f}M" if spec.n_params else "-"
        cached = "yes" if weights_cached(name, args.cache_dir) else ("-" if not spec.has_weights else "no")
        cached = "bundled" if spec.bundled_weights is not None and cached == "yes" else cached
        print(f"{name:<16} {params:>10}  {cached:<7}  {spec.description}")
    print(f"cache: {cache}")


def run_download(args) -> None:
    from shap_e.models.download import fetch_file_cached
    from shap_e.models.registry import MODELS, get_spec

    unknown = [n for n in args.names if n not in MODELS]
    if unknown:
        raise CliError(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(sorted(MODELS))}")
    for name in args.names:
        spec = get_spec(name)
        if not spec.has_weights:
            say(f"{name}: config only, nothing to download")
            continue
        if spec.bundled_weights is not None:
            say(f"{name}: bundled with the package, nothing to download ({spec.bundled_weights})")
            continue
        path = fetch_file_cached(spec.url, spec.sha256, args.cache_dir, progress=True, redownload=args.redownload)
        say(f"{name}: {path}")
