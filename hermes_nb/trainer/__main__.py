"""``python -m hermes_nb.trainer --config RUN_DIR/config.yaml``: the trainer process, with every backend."""

import sys

from hermes_nb.backends import PARTS
from hermes_nb.trainer.main import main

sys.exit(main(PARTS))
