"""hermes-nb: RL training of language models on verifiable environments, from Jupyter.

``%load_ext hermes_nb`` registers the ``%rl_*`` magics; ``await hermes_nb.rl_list_environments()`` and the other
``rl_*`` coroutines are the core API; ``hermes_nb.run_sync(coro)`` runs one from synchronous code. The ``rl_*``
names come from the command table (``hermes_nb.command_table``), which also makes the magics, the CLI and the agent
tools.
Every name is imported on first use (module ``__getattr__``), so ``import hermes_nb`` stays fast and pulls in
neither pydantic models nor torch, wandb or the notebook stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hermes_nb import command_table as _command_table
from hermes_nb.selection import listeners as _selection_listeners

__version__ = "0.1.0"

# The rl_* commands are exported from the command table (hermes_nb.command_table); the other public names, each the
# module that defines it:
_EXPORTS: dict[str, str] = {
    "HermesNBError": "hermes_nb.errors",
    "BaseEnv": "hermes_nb.env",
    "BaseEnvConfig": "hermes_nb.env",
    "ScoredDataGroup": "hermes_nb.env",
    "StopRule": "hermes_nb.protocol.sweep_state",
    "run_sync": "hermes_nb.syncio",
    # The notebook layer pulls in ipywidgets and matplotlib: imported only when one of these is used.
    "dashboard": "hermes_nb.notebook",
    "save_metrics_plot": "hermes_nb.plotting",
}
_COMMANDS: dict[str, str] = {command.name: command.module for command in _command_table.exported()}

__all__ = sorted([*_COMMANDS, *_EXPORTS, "__version__", "load_ipython_extension"])

# For type checkers: the same names, statically. tests/unit/test_command_table.py checks the rl_* ones against the
# table (each from the module the table names).
if TYPE_CHECKING:
    from hermes_nb.env import BaseEnv as BaseEnv
    from hermes_nb.env import BaseEnvConfig as BaseEnvConfig
    from hermes_nb.env import ScoredDataGroup as ScoredDataGroup
    from hermes_nb.errors import HermesNBError as HermesNBError
    from hermes_nb.model_test.runner import rl_test_inference as rl_test_inference
    from hermes_nb.notebook.widgets.dashboard import dashboard as dashboard
    from hermes_nb.plotting import save_metrics_plot as save_metrics_plot
    from hermes_nb.protocol.sweep_state import StopRule as StopRule
    from hermes_nb.rollouts.commands import rl_get_samples as rl_get_samples
    from hermes_nb.runs.commands import rl_check_status as rl_check_status
    from hermes_nb.runs.commands import rl_compare_runs as rl_compare_runs
    from hermes_nb.runs.commands import rl_delete_run as rl_delete_run
    from hermes_nb.runs.commands import rl_estimate_run as rl_estimate_run
    from hermes_nb.runs.commands import rl_get_results as rl_get_results
    from hermes_nb.runs.commands import rl_list_runs as rl_list_runs
    from hermes_nb.runs.commands import rl_start_training as rl_start_training
    from hermes_nb.runs.commands import rl_stop_training as rl_stop_training
    from hermes_nb.runs.commands import rl_tag_run as rl_tag_run
    from hermes_nb.runs.commands import rl_tail_logs as rl_tail_logs
    from hermes_nb.runs.sweeps.commands import rl_stop_sweep as rl_stop_sweep
    from hermes_nb.runs.sweeps.commands import rl_sweep as rl_sweep
    from hermes_nb.runs.sweeps.commands import rl_sweep_status as rl_sweep_status
    from hermes_nb.selection.commands import rl_edit_config as rl_edit_config
    from hermes_nb.selection.commands import rl_get_current_config as rl_get_current_config
    from hermes_nb.selection.commands import rl_list_environments as rl_list_environments
    from hermes_nb.selection.commands import rl_load_config as rl_load_config
    from hermes_nb.selection.commands import rl_reset_config as rl_reset_config
    from hermes_nb.selection.commands import rl_select_environment as rl_select_environment
    from hermes_nb.syncio import run_sync as run_sync


def _warm_up() -> None:
    """An environment was selected: the first run will be soon, so its warm kits start now (a thread of its own)."""
    from hermes_nb.runs.supervision import warm_start

    warm_start.prepare_first()


# Registered here, above both selection and runs, so that whichever face selects, the first run finds a kit.
_selection_listeners.on_selected(_warm_up)


def __getattr__(name: str) -> Any:
    module = _COMMANDS.get(name) or _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hermes_nb' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext hermes_nb``: register the magics (hermes_nb.notebook.magics)."""
    from hermes_nb.notebook.magics import load_ipython_extension as load

    load(ipython)
