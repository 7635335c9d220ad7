"""hermes-nb: RL training of language models on verifiable environments, from Jupyter.

``%load_ext hermes_nb`` registers the ``%rl_*`` magics; ``await hermes_nb.rl_list_environments()`` and the other
``rl_*`` coroutines are the core API; ``hermes_nb.run_sync(coro)`` runs one from synchronous code.
Every name is imported on first use (module ``__getattr__``), so ``import hermes_nb`` stays fast and pulls in
neither pydantic models nor torch, wandb or the notebook stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it. The run lifecycle names resolve through hermes_nb.api, which re-exports
# them from hermes_nb.runs.api.
_EXPORTS: dict[str, str] = {
    "rl_list_environments": "hermes_nb.api",
    "rl_select_environment": "hermes_nb.api",
    "rl_get_current_config": "hermes_nb.api",
    "rl_edit_config": "hermes_nb.api",
    "rl_reset_config": "hermes_nb.api",
    "rl_load_config": "hermes_nb.api",
    "rl_start_training": "hermes_nb.api",
    "rl_check_status": "hermes_nb.api",
    "rl_stop_training": "hermes_nb.api",
    "rl_list_runs": "hermes_nb.api",
    "rl_get_results": "hermes_nb.api",
    "rl_get_samples": "hermes_nb.api",
    "rl_tail_logs": "hermes_nb.api",
    "rl_test_inference": "hermes_nb.api",
    "HermesNBError": "hermes_nb.errors",
    "BaseEnv": "hermes_nb.env",
    "BaseEnvConfig": "hermes_nb.env",
    "ScoredDataGroup": "hermes_nb.env",
    "run_sync": "hermes_nb.syncio",
    # The notebook layer pulls in ipywidgets and matplotlib: imported only when one of these is used.
    "dashboard": "hermes_nb.notebook",
    "save_metrics_plot": "hermes_nb.plotting",
}

__all__ = [
    "BaseEnv",
    "BaseEnvConfig",
    "HermesNBError",
    "ScoredDataGroup",
    "__version__",
    "dashboard",
    "load_ipython_extension",
    "rl_check_status",
    "rl_edit_config",
    "rl_get_current_config",
    "rl_get_results",
    "rl_get_samples",
    "rl_list_environments",
    "rl_list_runs",
    "rl_load_config",
    "rl_reset_config",
    "rl_select_environment",
    "rl_start_training",
    "rl_stop_training",
    "rl_tail_logs",
    "rl_test_inference",
    "run_sync",
    "save_metrics_plot",
]

if TYPE_CHECKING:
    from hermes_nb.api import (
        rl_check_status,
        rl_edit_config,
        rl_get_current_config,
        rl_get_results,
        rl_get_samples,
        rl_list_environments,
        rl_list_runs,
        rl_load_config,
        rl_reset_config,
        rl_select_environment,
        rl_start_training,
        rl_stop_training,
        rl_tail_logs,
        rl_test_inference,
    )
    from hermes_nb.env import BaseEnv, BaseEnvConfig, ScoredDataGroup
    from hermes_nb.errors import HermesNBError
    from hermes_nb.notebook.dashboard import dashboard
    from hermes_nb.plotting import save_metrics_plot
    from hermes_nb.syncio import run_sync


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
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
