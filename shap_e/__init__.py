"""Shap-E: generate 3D implicit functions from text or images."""

__version__ = "0.1.0"
