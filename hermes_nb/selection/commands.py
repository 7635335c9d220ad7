"""The selection commands of the public surface: list and select environments, read, edit, reset and load the
run config (``rl_list_environments`` ... ``rl_load_config``); ``hermes_nb.api`` re-exports them.

State (the selected environment and its config) lives in ``hermes_nb.selection.session`` and is shared with the CLI
and other processes. Listing and selecting environments, reading, editing and resetting the config are the
synchronous ``selection.service``; these
coroutines are its async face, each call that waits (the scan of the search path, the schema read in a child
process) in a worker thread.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from hermes_nb.config import LOCKED_FIELDS
from hermes_nb.errors import ConfigError
from hermes_nb.selection import editing, listeners, service, session
from hermes_nb.selection.current import ensure_started
from hermes_nb.selection.discovery import EnvironmentInfo
from hermes_nb.selection.results import ConfigView, EditResult, EnvironmentList, SelectionResult
from hermes_nb.selection.schema import read_schema
from hermes_nb.selection.service import EDIT_LOCK
from hermes_nb.system import home


async def rl_list_environments() -> EnvironmentList:
    """Every environment on the search path (shipped + ``HERMES_NB_ENV_PATH``), and files that failed to parse."""
    return await asyncio.to_thread(service.list_environments)


async def rl_select_environment(name: str) -> SelectionResult:
    """Select ``name`` and load its default config (read in a child process; the caller never imports it)."""
    return await asyncio.to_thread(service.select_environment, name)


async def rl_get_current_config() -> ConfigView:
    """Configurable fields (type, default, value, constraints) and locked fields with their values."""
    return service.config_view()


async def rl_edit_config(field: str | dict[str, Any], value: Any = None) -> EditResult:
    """Set one field (``rl_edit_config("group_size", 8)``) or several at once (``rl_edit_config({...})``).

    Names are dotted (``trainer.learning_rate``) or bare when unambiguous; text values are parsed ("1e-4",
    "true", "none"). All-or-nothing: on any error nothing changes.
    """
    edits = dict(field) if isinstance(field, dict) else {field: value}
    return service.edit_config(edits)


async def rl_reset_config() -> ConfigView:
    """Back to the defaults of the selected environment (its ``config_init()``), trainer and W&B."""
    return service.reset_config()


async def rl_load_config(path: str | Path) -> EditResult:
    """Apply a YAML config file (sections ``env``, ``trainer``, ``wandb``; optional ``environment: NAME``), or a
    shipped config by name (``rl_load_config("quickstart")``).

    The file's values are edits on top of the current config, with the same validation, all-or-nothing.
    Locked fields in the file (a saved run's ``config.yaml`` has them) are not applied and are listed in
    ``ignored``; the ``infra`` section is ignored likewise.
    """
    ensure_started()
    data = _read_config_file(_config_path(Path(path)))
    selection = await _selection_from_file(data, str(path))
    edits, ignored = _edits_from_file(data)
    with EDIT_LOCK:
        base = session.load()
        if selection is not None:
            base = editing.selected_state(base, *selection)
        state, changed, previous = editing.apply_edits(base, edits)
        session.save(state)
    if selection is not None:
        listeners.selected()
    return EditResult(
        changed=changed, previous=previous, ignored=ignored, source=str(path), config=editing.build_view(state)
    )


def _config_path(path: Path) -> Path:
    """``path``, or for a relative path that does not exist here, the same path in the project, or a shipped
    config by file name or by name (``quickstart`` for ``configs/quickstart.yaml``)."""
    if path.is_absolute() or path.exists():
        return path
    shipped = home.shipped_configs_dir()
    for candidate in (home.PROJECT_ROOT / path, shipped / path.name, shipped / f"{path.name}.yaml"):
        if candidate.is_file():
            return candidate
    names = ", ".join(home.shipped_config_names())
    raise ConfigError(f"config {str(path)!r} is neither a file nor a shipped config; shipped configs: {names}")


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping with env/trainer/wandb sections")
    unknown = sorted(set(data) - {"environment", "env", "trainer", "wandb", "infra"})
    if unknown:
        raise ConfigError(
            f"config file {path}: unknown section(s) {', '.join(unknown)}; accepted: environment, env/trainer/wandb"
        )
    return data


async def _selection_from_file(data: dict[str, Any], source: str) -> tuple[EnvironmentInfo, Any] | None:
    wanted = data.get("environment")
    if isinstance(wanted, dict):
        wanted = wanted.get("name")
    if wanted is None:
        return None
    if not isinstance(wanted, str):
        raise ConfigError(f"config file {source}: 'environment' must be an environment name")
    info = await asyncio.to_thread(service.find_environment, wanted)
    return info, await read_schema(info.file, info.class_name, framework=info.framework)


def _edits_from_file(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    edits: dict[str, Any] = {}
    ignored: list[str] = []
    for section in editing.SECTIONS:
        values = data.get(section) or {}
        if not isinstance(values, dict):
            raise ConfigError(f"config section {section!r} must be a mapping of field: value")
        for key, value in values.items():
            name = f"{section}.{key}"
            if name in LOCKED_FIELDS:
                ignored.append(name)
            else:
                edits[name] = value
    return edits, ignored
