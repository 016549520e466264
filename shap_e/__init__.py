"""Shap-E: generate 3D implicit functions from text or images."""

__version__ = "0.2.0"

__all__ = ["__version__", "encode"]


def __getattr__(name):
    # Lazy, so that `import shap_e` stays cheap and free of side effects.
    if name == "encode":
        from shap_e.encoding import encode

        return encode
    raise AttributeError(f"module 'shap_e' has no attribute {name!r}")
