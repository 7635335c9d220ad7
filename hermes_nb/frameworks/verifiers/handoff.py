"""What the adapter hands a verifiers run's environment process, named once for both sides: the process's
environment class (by file and name, so the kernel never imports verifiers or httpx), the variable naming the
environment file whose taskset it runs, and the one saying which verifiers client samples."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

EPISODE_ENV_FILE = Path(__file__).resolve().with_name("episode_env.py")
EPISODE_ENV_CLASS = "VerifiersEnv"
EPISODE_ENV_SPEC = f"{EPISODE_ENV_FILE}:{EPISODE_ENV_CLASS}"
FILE_VAR = "HERMES_NB_VERIFIERS_FILE"  # the environment file (its module is the taskset id)
CLIENT_VAR = "HERMES_NB_VERIFIERS_CLIENT"  # "train" (a local model's server: token ids) or "eval" (an endpoint)
ClientKind = Literal["train", "eval"]
# The settings key prefix of the taskset's own config fields ("taskset.split" is verifiers' --env.taskset.split).
TASKSET_PREFIX = "taskset."
# The held-out split by hermes-nb's convention (verifiers has no split of its own): a taskset whose config field
# `split` accepts "held_out" is evaluated on those tasks when the settings name no other evaluation (`eval_taskset`).
SPLIT_FIELD = "split"
HELD_OUT_SPLIT = "held_out"
# Where pip installs packages: a module in a package there is run as that package.
INSTALL_FOLDERS = ("site-packages", "dist-packages")


def taskset_id(file: str) -> tuple[str, Path]:
    """The taskset id of the environment in ``file`` and the folder to import it from: a module of a ``vf-init``
    package (``PROJECT/name/taskset.py`` beside ``PROJECT/pyproject.toml``) is the project's name (what
    ``vf-eval`` takes; verifiers imports it as ``name``) from the project's folder; a module of a package pip
    installed is that package; else a module file is its stem in its folder, a package's ``__init__.py`` the
    package in the folder above."""
    path = Path(file).resolve()
    project = _project_name(path.parent.parent / "pyproject.toml")
    if project is not None and (path.parent / "__init__.py").is_file():
        return project, path.parent.parent
    if path.name == "__init__.py" or path.parent.parent.name in INSTALL_FOLDERS:
        return path.parent.name, path.parent.parent  # an installed package: verifiers imports it by its name
    return path.stem, path.parent


def _project_name(pyproject: Path) -> str | None:
    try:
        name = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("name")
    except (OSError, ValueError):
        return None
    return name if isinstance(name, str) and name else None
