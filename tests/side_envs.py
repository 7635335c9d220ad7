"""Side environments for tests: the interpreters `make test` builds under .venvs/ (scripts/side_env.sh).

``side_env_python("atropos")`` returns the environment's python. Outside CI a missing environment skips the test
(build it with ``sh scripts/side_env.sh NAME``); in CI (``ci.in_ci``) it fails, so a missing install step shows.
"""

from __future__ import annotations

import os
from pathlib import Path

from ci import skip_or_fail

REPO_ROOT = Path(__file__).resolve().parent.parent


def side_envs_dir() -> Path:
    """Where scripts/side_env.sh builds them: ``SIDE_ENVS_DIR`` (relative to the repository) or ``.venvs``."""
    return REPO_ROOT / os.environ.get("SIDE_ENVS_DIR", ".venvs")


def side_env_python(name: str) -> Path:
    python = side_envs_dir() / name / "bin" / "python"
    if (side_envs_dir() / name / ".stamp").is_file() and python.is_file():
        return python
    message = f"side environment {name!r} is not built: run `sh scripts/side_env.sh {name}` (make test does)"
    skip_or_fail(message)
