"""`python -m shap_e ...` is the `shap-e` command."""
import sys

from shap_e.cli import main

sys.exit(main())
