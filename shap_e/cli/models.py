"""`shap-e models` (the registry) and `shap-e download NAME` (fetch weights into the cache)."""
from shap_e.cli.common import CliError, say


def add_commands(commands) -> None:
    models = commands.add_parser("models", help="list the model registry", description="List known models.")
    models.add_argument("--cache-dir", help="model cache")
    models.set_defaults(run=run_models)
    download = commands.add_parser("download", help="fetch official weights", description="Download weights.")
    download.add_argument("names", nargs="+", help="registry names, e.g. text300M transmitter")
    download.add_argument("--cache-dir", help="model cache")
    download.add_argument("--redownload", action="store_true", help="replace a cached file that is partial or corrupt")
    download.set_defaults(run=run_download)


def run_models(args) -> None:
    from shap_e.models.cache import CORRUPT, cache_state, default_cache_dir
    from shap_e.models.registry import MODELS

    cache = args.cache_dir or default_cache_dir()
    print(f"{'name':<18} {'parameters':>10}  {'cached':<8}  description")
    damaged = []
    for name, spec in sorted(MODELS.items()):
        params = f"{spec.n_params / 1e6:.1f}M" if spec.n_params else "-"
        state = cache_state(name, args.cache_dir)
        cached = {"ok": "yes", "missing": "no"}.get(state, state)
        if state == CORRUPT:
            damaged.append(name)
        print(f"{name:<18} {params:>10}  {cached:<8}  {spec.description}")
    print(f"cache: {cache}")
    for name in damaged:
        fix = ("reinstall the package" if MODELS[name].bundled_weights is not None
               else f"run `shap-e download {name} --redownload`")
        print(f"{name}: the cached file is partial or corrupt (size or sha256 differs); {fix}")


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
        path = fetch_file_cached(spec.url, True, args.cache_dir, sha256=spec.sha256, redownload=args.redownload)
        say(f"{name}: {path}")
