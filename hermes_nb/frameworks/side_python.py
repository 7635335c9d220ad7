"""The Python of a framework whose pins conflict with hermes-nb's or another framework's: named by a variable,
asked once whether it has what the framework's runs need, refused in one line before anything starts.

A framework declares a ``SidePython`` (its variable, the install command, a probe that prints what is missing as
a JSON list); ``checked(file)`` is the interpreter to run ``file`` with, or an ``EnvironmentPythonError`` naming
the interpreter, what it lacks and how to install it. The probe runs once per interpreter and modification time,
in the environment atroposlib's interpreter is reached with (``atropos.interpreter.env_python_environment``).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from hermes_nb.atropos.interpreter import PROBE_TIMEOUT_S, env_python_environment
from hermes_nb.errors import EnvironmentPythonError


def modules_probe(modules: tuple[str, ...], *, extra: str = "") -> str:
    """Source that prints, as a JSON list, which of ``modules`` the interpreter cannot import, plus what the
    statements in ``extra`` append to the list ``missing``."""
    return (
        "import importlib.util, json, os, shutil, sys; "
        f"missing = [m for m in {list(modules)!r} if importlib.util.find_spec(m) is None]; "
        f"{extra}{'; ' if extra else ''}print(json.dumps(missing))"
    )


class SidePython(BaseModel):
    """One framework's interpreter: ``variable`` names it (unset: hermes-nb's own)."""

    model_config = ConfigDict(frozen=True)

    framework: str  # as a user reads it: "OpenEnv"
    variable: str
    install_command: str
    venv_python: str  # where install_command puts the interpreter, for the hint
    probe_source: str
    lacks: str = "cannot import"  # the verb before what is missing

    def configured(self) -> str:
        value = os.environ.get(self.variable, "").strip()
        return str(Path(value).expanduser()) if value else sys.executable

    def checked(self, file: str, *, not_needed: Collection[str] = ()) -> str:
        """The configured interpreter, once it has what ``file``'s runs need (what the probe looks for, less
        ``not_needed``: what this run does without)."""
        python = self.configured()
        mtime = os.stat(python).st_mtime_ns if os.path.exists(python) else -1
        missing = [m for m in _missing(self.framework, python, mtime, self.probe_source) if m not in not_needed]
        if missing:
            raise EnvironmentPythonError(
                f"{file} is a {self.framework} environment; the {self.framework} Python {python} {self.lacks} "
                f"{', '.join(missing)}. Install them in a virtual environment of their own ({self.install_command}) "
                f"and point hermes-nb at it: {self.variable}={self.venv_python}"
            )
        return python


@functools.lru_cache(maxsize=32)
def _missing(framework: str, python: str, mtime: int, probe_source: str) -> tuple[str, ...]:
    try:
        done = subprocess.run(
            [python, "-c", probe_source], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
            env=env_python_environment(os.environ), stdin=subprocess.DEVNULL,
        )  # fmt: skip
        return tuple(json.loads(done.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        raise EnvironmentPythonError(f"the {framework} Python {python} is not a working Python 3: {exc}") from None
