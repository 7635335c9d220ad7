"""Another Python runs this: an interpreter other than the one running hermes-nb (a framework's side venv, the
vLLM sampler's), named by a variable, reached with ``hermes_nb`` importable, asked once what it has.

A foreign interpreter imports ``hermes_nb`` (a bridge, a schema reader, an environment process run in it) through a
folder that holds only a link to this package (``import_root``): putting hermes-nb's own site-packages on its path
would shadow the interpreter's packages (transformers among them) with hermes-nb's. ``env_python_environment`` is
the process environment every such child gets.

A framework whose pins conflict with hermes-nb's or another framework's declares a ``SidePython`` (its variable,
the install command, a probe that prints what is missing as a JSON list); ``checked(file)`` is the interpreter to
run ``file`` with, or an ``EnvironmentPythonError`` naming the interpreter, what it lacks and how to install it.
The probe runs once per interpreter and modification time.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Collection, Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from hermes_nb.errors import EnvironmentPythonError
from hermes_nb.system import home

# An interpreter's start and a metadata lookup take well under a second; a loaded two-core machine, a few.
PROBE_TIMEOUT_S = 30.0


def configured_interpreter(variable: str) -> str:
    """The interpreter ``variable`` names (``~`` expanded), else the one running hermes-nb."""
    value = os.environ.get(variable, "").strip()
    return str(Path(value).expanduser()) if value else sys.executable


def is_executable_file(python: str) -> bool:
    return os.access(python, os.X_OK) and not Path(python).is_dir()


def import_root() -> Path:
    """A folder whose only entry is a link to the ``hermes_nb`` package, for a foreign interpreter's path."""
    root = home.home_dir() / "cache" / "env_python_path"
    link = root / "hermes_nb"
    if link.is_symlink() and link.resolve() == home.PACKAGE_DIR:
        return root
    root.mkdir(parents=True, exist_ok=True)
    # A link made aside and renamed over the old one: a concurrent reader sees the old link or the new, never none.
    pending = root / f".hermes_nb.{os.getpid()}.{threading.get_ident()}"
    pending.unlink(missing_ok=True)
    pending.symlink_to(home.PACKAGE_DIR, target_is_directory=True)
    os.replace(pending, link)
    return root


def env_python_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with ``hermes_nb`` importable (``import_root`` first on ``PYTHONPATH``) and output unbuffered."""
    env = dict(base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(import_root()), base.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


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
        return configured_interpreter(self.variable)

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
