"""The web app behind `shap-e app`: a prompt, a picture or a mesh -> 3D in the browser (Gradio).

The app holds the page, the job queue and the temporary files; the generating, encoding and
writing are the `shap-e` command's own, handed to `serve` as a `Backend`
(`shap_e.cli.backend.CliBackend`). Gradio (`pip install "shap-e[app]"`) is imported only by `serve`.
"""
from shap_e.app.backend import Backend, EncodeRequest, Outcome, SampleRequest
from shap_e.app.server import AppSettings, serve

__all__ = ["AppSettings", "Backend", "EncodeRequest", "Outcome", "SampleRequest", "serve"]
