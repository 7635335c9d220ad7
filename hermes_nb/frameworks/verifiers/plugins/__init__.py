"""verifiers plugins of hermes-nb. verifiers imports a harness by a top-level module name (its id), so the
environment process puts this folder on its import path (``PLUGINS_DIR``) and names the harness by its module."""

from pathlib import Path

PLUGINS_DIR = Path(__file__).resolve().parent
