"""Where hermes-nb keeps its state, and how it finds API keys.

``<home>`` defaults to ``~/.hermes/rl`` and is set by ``HERMES_NB_HOME``. Runs live in ``<home>/runs/<run_id>``,
logs in ``<home>/logs``. Keys come from the process environment first, then ``<home>/.env`` and
``~/.hermes/.env``; a key is never printed, logged or written by hermes-nb.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from hermes_nb.protocol.run_files import ARCHIVE_DIR, LOGS_DIR, RUNS_DIR, SWEEPS_DIR, RunPaths

HOME_ENV_VAR = "HERMES_NB_HOME"
ENV_PATH_VAR = "HERMES_NB_ENV_PATH"
# The Python that reads and runs atroposlib environments (hermes_nb.frameworks.atroposlib.interpreter); unset: this
# interpreter.
ENV_PYTHON_VAR = "HERMES_NB_ENV_PYTHON"
# HF_TOKEN: gated and private hub models (hermes_nb/system/hub.py); huggingface_hub reads it from the environment.
KNOWN_KEYS = ("TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY", "HF_TOKEN")

# The hermes_nb package folder (it holds the shipped assets).
PACKAGE_DIR = Path(__file__).resolve().parents[1]
# The folder a child Python needs on its path to import hermes_nb: a clone's root, or site-packages.
PROJECT_ROOT = PACKAGE_DIR.parent
# The shipped environments/, configs/ and notebooks/ inside the package. In a clone (and an editable install) these
# are links to the repository's folders, read live; the sdist and the wheel carry copies (pyproject.toml).
SHIPPED_PACKAGE_DIR = "_shipped"


def home_dir() -> Path:
    configured = os.environ.get(HOME_ENV_VAR)
    path = Path(configured).expanduser() if configured else Path.home() / ".hermes" / "rl"
    return path


def runs_dir() -> Path:
    return home_dir() / RUNS_DIR


def logs_dir() -> Path:
    return home_dir() / LOGS_DIR


def sweeps_dir() -> Path:
    return home_dir() / SWEEPS_DIR


def archive_dir() -> Path:
    return home_dir() / ARCHIVE_DIR


def run_dir(run_id: str) -> Path:
    return runs_dir() / run_id


def run_paths(run_id: str) -> RunPaths:
    """Every path of run ``run_id`` under this process's home."""
    return RunPaths.under(home_dir(), run_id)


def _shipped(folder: str) -> Path:
    """A shipped folder, found through the installed package (never the working directory).

    Resolved, so that a clone reports the repository's own folder rather than the link to it.
    """
    return Path(str(resources.files("hermes_nb").joinpath(SHIPPED_PACKAGE_DIR, folder))).resolve()


def shipped_environments_dir() -> Path:
    return _shipped("environments")


def shipped_configs_dir() -> Path:
    return _shipped("configs")


def shipped_notebooks_dir() -> Path:
    """The example notebooks (``hermes-nb examples DIR`` copies them out)."""
    return _shipped("notebooks")


def shipped_config_names() -> list[str]:
    """The shipped configs by the name ``rl_load_config`` takes (``quickstart`` for ``configs/quickstart.yaml``)."""
    return sorted(path.stem for path in shipped_configs_dir().glob("*.yaml"))


def embedded_base_model_dir() -> Path:
    return PACKAGE_DIR / "assets" / "base_model"


def embedded_chat_model_dir() -> Path:
    """The shipped Qwen3 chat model with a tool-calling template (docs/chat_model.md)."""
    return PACKAGE_DIR / "assets" / "chat_model"


def environment_search_path() -> list[Path]:
    """The shipped environments first, then each directory in ``HERMES_NB_ENV_PATH`` (``os.pathsep``-separated)."""
    paths = [shipped_environments_dir()]
    extra = os.environ.get(ENV_PATH_VAR, "")
    paths += [Path(p).expanduser() for p in extra.split(os.pathsep) if p.strip()]
    return paths


def _parse_dotenv(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        values[key.strip()] = value.strip().strip("'\"")
    return values


def load_keys() -> list[str]:
    """Read known keys from the ``.env`` files into ``os.environ`` without overriding set variables.

    Returns the names (never the values) of the keys that are now available.
    """
    for dotenv in (home_dir() / ".env", Path.home() / ".hermes" / ".env"):
        if not dotenv.is_file():
            continue
        for key, value in _parse_dotenv(dotenv).items():
            if key in KNOWN_KEYS and value and not os.environ.get(key):
                os.environ[key] = value
    return [key for key in KNOWN_KEYS if os.environ.get(key)]


def secret_values() -> list[str]:
    """The values of the known keys now set, for redaction of logs and saved configs."""
    return [value for key in KNOWN_KEYS if (value := os.environ.get(key))]
