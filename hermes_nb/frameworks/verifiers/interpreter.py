"""The verifiers Python: the interpreter that reads a verifiers taskset's config and runs its episodes, checked.

``HERMES_NB_VERIFIERS_PYTHON`` names it (verifiers pins openai<3 and mcp==2.0.0, which OpenEnv's pins exclude, so it
lives in a venv of its own, ``scripts/side_envs/verifiers.txt``); unset, hermes-nb's own interpreter. It is asked
once (one short child) whether it imports ``verifiers``, ``renderers`` (its train client's tokenizer) and
``tokenizers``, and whether ``uv`` is beside it or on PATH (verifiers runs its harness programs with ``uv``); when
not, one error names the interpreter and the install command, before anything starts.
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

VERIFIERS_PYTHON_VAR = "HERMES_NB_VERIFIERS_PYTHON"
INSTALL_COMMAND = (
    "python3 -m venv ~/.venvs/verifiers && ~/.venvs/verifiers/bin/pip install verifiers==0.4.0 tokenizers uv"
)
REQUIRED_MODULES = ("verifiers", "renderers", "tokenizers")
# Missing modules, then "uv" when no uv is beside the interpreter or on PATH.
PROBE_SOURCE = (
    "import importlib.util, json, os, shutil, sys; "
    f"missing = [m for m in {list(REQUIRED_MODULES)!r} if importlib.util.find_spec(m) is None]; "
    "here = os.path.dirname(sys.executable); "
    "uv = shutil.which('uv', path=os.pathsep.join([here, os.environ.get('PATH', '')])); "
    "print(json.dumps(missing + ([] if uv else ['uv'])))"
)


def configured_python() -> str:
    value = os.environ.get(VERIFIERS_PYTHON_VAR, "").strip()
    return str(Path(value).expanduser()) if value else sys.executable


def verifiers_python(file: str) -> str:
    """The verifiers Python, checked to import what a verifiers run needs and to find ``uv``."""
    python = configured_python()
    missing = _missing(python, os.stat(python).st_mtime_ns if os.path.exists(python) else -1)
    if missing:
        raise EnvironmentPythonError(
            f"{file} is a verifiers environment; the verifiers Python {python} cannot import or find "
            f"{', '.join(missing)}. Install them in a virtual environment of their own ({INSTALL_COMMAND}) and "
            f"point hermes-nb at it: {VERIFIERS_PYTHON_VAR}=~/.venvs/verifiers/bin/python"
        )
    return python


def process_path(python: str, base: str) -> str:
    """PATH for the processes of a verifiers run: the interpreter's folder first, so verifiers finds the ``uv``
    installed beside it (it would otherwise install one into the user's home)."""
    return os.pathsep.join(p for p in (str(Path(python).parent), base) if p)


@functools.lru_cache(maxsize=16)
def _missing(python: str, mtime: int) -> tuple[str, ...]:
    try:
        done = subprocess.run(
            [python, "-c", PROBE_SOURCE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
            env=env_python_environment(os.environ), stdin=subprocess.DEVNULL,
        )  # fmt: skip
        return tuple(json.loads(done.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        raise EnvironmentPythonError(f"the verifiers Python {python} is not a working Python 3: {exc}") from None
