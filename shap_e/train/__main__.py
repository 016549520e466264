"""`python -m shap_e.train text --config FILE` is `shap-e train text --config FILE`."""
import sys

from shap_e.train.run import main

sys.exit(main())
