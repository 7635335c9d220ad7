"""The environment Python: which interpreter reads and runs an atroposlib environment, checked before use.

``HERMES_NB_ENV_PYTHON`` names it (``%config HermesNB.env_python`` sets that variable for a kernel); unset, it is
the interpreter running hermes-nb. It applies to environments written against atroposlib: hermes-nb's own
environments import ``hermes_nb.env`` and run where hermes-nb is installed. Before selection reads a config or a
run starts, the interpreter is asked (one short child process) whether it exists and can import atroposlib; when
not, the error says which interpreter was asked and how to install atroposlib for it. How another Python is
reached (``hermes_nb`` importable through ``import_root``) is ``hermes_nb.system.side_python``'s.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading

from pydantic import BaseModel, ValidationError

from hermes_nb.errors import EnvironmentPythonError
from hermes_nb.system import home
from hermes_nb.system.side_python import (
    PROBE_TIMEOUT_S,
    configured_interpreter,
    env_python_environment,
    is_executable_file,
)

ENV_PYTHON_VAR = home.ENV_PYTHON_VAR
# The pin hermes-nb is tested with (scripts/side_envs/atropos.txt): atroposlib 0.4.0 needs transformers 4.
INSTALL_COMMAND = (
    "python3 -m venv ~/.venvs/atropos && ~/.venvs/atropos/bin/pip install atroposlib==0.4.0 'transformers<5'"
)
# What the probe runs: the standard library only, so any Python 3 answers, whatever it has installed.
PROBE_SOURCE = """
import importlib.util, json, sys
version = None
if importlib.util.find_spec("atroposlib") is not None:
    try:
        from importlib.metadata import version as dist_version
        version = dist_version("atroposlib")
    except Exception:
        version = "unknown"
print(json.dumps({"python_version": "%d.%d.%d" % sys.version_info[:3], "atroposlib": version}))
"""


class PythonProbe(BaseModel):
    """What an interpreter said about itself."""

    python: str
    python_version: str
    atroposlib: str | None  # its version; None when it cannot import atroposlib


# Interpreters that could import atroposlib, by (path, mtime): asked once per process. A failed probe is not
# remembered, so installing atroposlib is seen on the next try.
_GOOD: dict[tuple[str, int], PythonProbe] = {}
_GOOD_LOCK = threading.Lock()


def configured_python() -> str:
    """``HERMES_NB_ENV_PYTHON`` (``~`` expanded), else the interpreter running hermes-nb."""
    return configured_interpreter(ENV_PYTHON_VAR)


def env_python(file: str) -> str:
    """The environment Python that reads and runs the atroposlib environment in ``file``, checked to import
    atroposlib."""
    python = configured_python()
    require_atroposlib(python, file)
    return python


def require_atroposlib(python: str, file: str) -> PythonProbe:
    """The probe of ``python``; raises ``EnvironmentPythonError`` when it is missing or lacks atroposlib."""
    key = _identity(python)
    with _GOOD_LOCK:
        known = _GOOD.get(key)
    if known is not None:
        return known
    probe = probe_python(python)
    if probe.atroposlib is None:
        raise EnvironmentPythonError(
            f"{file} is written against atroposlib, which the environment Python {python} ({_source()}) cannot "
            f"import. Install atroposlib in a virtual environment of its own ({INSTALL_COMMAND}) and point "
            f"hermes-nb at it: {ENV_PYTHON_VAR}=~/.venvs/atropos/bin/python, or in a notebook "
            "%config HermesNB.env_python = '~/.venvs/atropos/bin/python'"
        )
    with _GOOD_LOCK:
        _GOOD[key] = probe
    return probe


def probe_python(python: str) -> PythonProbe:
    """Ask ``python`` for its version and its atroposlib; raises ``EnvironmentPythonError`` when it cannot answer."""
    where = f"the environment Python {python} ({_source()})"
    if not is_executable_file(python):
        raise EnvironmentPythonError(
            f"{where} is not an executable file; set {ENV_PYTHON_VAR} (or %config HermesNB.env_python) to a "
            f"Python with atroposlib installed, e.g. ~/.venvs/atropos/bin/python after {INSTALL_COMMAND}"
        )
    try:
        done = subprocess.run(
            [python, "-c", PROBE_SOURCE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env=env_python_environment(os.environ),
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentPythonError(f"{where} did not answer: {exc}") from None
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        return PythonProbe.model_validate({"python": python, **answer})
    except (IndexError, ValueError, ValidationError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        problem = f"{where} is not a working Python 3 (exit code {done.returncode}): {last}"
        raise EnvironmentPythonError(problem) from None


def _identity(python: str) -> tuple[str, int]:
    try:
        return python, os.stat(python).st_mtime_ns
    except OSError:
        return python, -1


def _source() -> str:
    return f"from {ENV_PYTHON_VAR}" if os.environ.get(ENV_PYTHON_VAR, "").strip() else "hermes-nb's own interpreter"
