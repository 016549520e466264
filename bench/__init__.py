"""Shap-E performance benchmark: full-size configs, seeded random weights, one subprocess per stage.

Run `python -m bench --help`; see bench/README.md.
"""
