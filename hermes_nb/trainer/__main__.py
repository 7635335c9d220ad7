"""``python -m hermes_nb.trainer --config RUN_DIR/config.yaml``."""

import sys

from hermes_nb.trainer.main import main

sys.exit(main())
