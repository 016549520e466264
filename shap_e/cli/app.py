"""`shap-e app`: serve the web app (`shap_e.app`) with the command's own generation and writing."""
import importlib.util

from shap_e.cli.common import CliError, pick_device, say

INSTALL = 'pip install "shap-e[app]"'


def add_commands(commands) -> None:
    app = commands.add_parser(
        "app", help="web app: text, picture or mesh -> 3D in the browser",
        description="Serve a local web page for text -> 3D, image -> 3D and mesh encoding (needs the [app] extra: "
        f"{INSTALL}).",
    )
    app.add_argument("--host", default="127.0.0.1",
                     help="address to listen on (default: this computer only; 0.0.0.0 opens it to the network)")
    app.add_argument("--port", type=int, default=7860)
    app.add_argument("--share", action="store_true", help="also make a temporary public gradio.live link")
    app.add_argument("--max-upload-mb", type=float, default=50.0, help="largest accepted upload")
    app.add_argument("--keep-minutes", type=float, default=60.0,
                     help="how long the files of a finished job stay downloadable")
    app.add_argument("--max-queue", type=int, default=8, help="jobs that may wait; more are turned away")
    app.add_argument("--device", choices=("auto", "cpu", "cuda", "mps"), default="auto")
    app.add_argument("--cache-dir", help="model cache (default: $SHAP_E_CACHE or ~/.cache/shap_e)")
    app.set_defaults(run=run_app)


def run_app(args) -> None:
    if importlib.util.find_spec("gradio") is None:
        raise CliError(f"the web app needs Gradio; install it with: {INSTALL}")
    from shap_e.app import AppSettings, serve
    from shap_e.app.server import LOCAL_HOSTS
    from shap_e.cli.backend import CliBackend

    settings = AppSettings(host=args.host, port=args.port, share=args.share, max_upload_mb=args.max_upload_mb,
                           keep_minutes=args.keep_minutes, max_queue=args.max_queue)
    if settings.host not in LOCAL_HOSTS:
        say(f"warning: --host {settings.host} lets other machines on the network use this app (it has no login); "
            "the default 127.0.0.1 keeps it to this computer")
    if settings.share:
        say("warning: --share makes the app reachable by anyone with the gradio.live link while it runs")
    serve(CliBackend(pick_device(args.device), args.cache_dir), settings)
