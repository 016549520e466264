"""`python -m shap_e.train text --config FILE` is `shap-e train text --config FILE`."""
import sys

from shap_e.cli import main

sys.exit(main(["train", *sys.argv[1:]]))
