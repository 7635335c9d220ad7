"""The OpenEnv Python: the interpreter that serves an OpenEnv environment and runs its episodes, checked first.

``HERMES_NB_OPENENV_PYTHON`` names it (OpenEnv's pins, openai 3 and fastmcp among them, live in a venv of their own,
``scripts/side_envs/openenv.txt``); unset, hermes-nb's own interpreter. It is asked once (one short child) whether it
imports ``openenv`` (the server), ``websockets`` (the session) and ``tokenizers`` (the chat template the episodes
render); when not, one error names the interpreter and the install command. hermes-nb reaches that interpreter as
atroposlib's does (``hermes_nb.atropos.interpreter.import_root``).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

from hermes_nb.atropos.interpreter import PROBE_TIMEOUT_S, env_python_environment
from hermes_nb.errors import EnvironmentPythonError

OPENENV_PYTHON_VAR = "HERMES_NB_OPENENV_PYTHON"
INSTALL_COMMAND = "python3 -m venv ~/.venvs/openenv && ~/.venvs/openenv/bin/pip install openenv==0.10.0 tokenizers"
REQUIRED_MODULES = ("openenv", "websockets", "tokenizers")
PROBE_SOURCE = (
    "import importlib.util, json; "
    f"print(json.dumps([m for m in {list(REQUIRED_MODULES)!r} if importlib.util.find_spec(m) is None]))"
)


def configured_python() -> str:
    value = os.environ.get(OPENENV_PYTHON_VAR, "").strip()
    return str(Path(value).expanduser()) if value else sys.executable


def openenv_python(file: str) -> str:
    """The OpenEnv Python, checked to import what an OpenEnv run needs."""
    python = configured_python()
    missing = _missing_modules(python, os.stat(python).st_mtime_ns if os.path.exists(python) else -1)
    if missing:
        raise EnvironmentPythonError(
            f"{file} is an OpenEnv environment; the OpenEnv Python {python} cannot import {', '.join(missing)}. "
            f"Install them in a virtual environment of their own ({INSTALL_COMMAND}) and point hermes-nb at it: "
            f"{OPENENV_PYTHON_VAR}=~/.venvs/openenv/bin/python"
        )
    return python


@functools.lru_cache(maxsize=16)
def _missing_modules(python: str, mtime: int) -> tuple[str, ...]:
    try:
        done = subprocess.run(
            [python, "-c", PROBE_SOURCE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
            env=env_python_environment(os.environ), stdin=subprocess.DEVNULL,
        )  # fmt: skip
        return tuple(json.loads(done.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        raise EnvironmentPythonError(f"the OpenEnv Python {python} is not a working Python 3: {exc}") from None
