"""The public async ``rl_*`` commands, gathered in one module: ``from hermes_nb.api import rl_start_training``.

Call with ``await rl_list_environments()`` in a notebook cell or any coroutine; from synchronous code use
``hermes_nb.run_sync(rl_list_environments())``. Each command is declared once, in the command table
(``hermes_nb.command_table``), which names the module that defines it: selection and config in
``hermes_nb.selection.commands``, the run lifecycle and the runs table in
``hermes_nb.runs.commands``, sweeps in ``hermes_nb.runs.sweeps.commands``, ``rl_test_inference`` in
``hermes_nb.model_test.runner``, ``rl_get_samples`` in ``hermes_nb.rollouts.commands``; none of those imports this
module. ``current_run_config`` and ``current_state`` (``hermes_nb.selection.current``) read the session "now".
The imports are written out for type checkers; ``tests/unit/test_command_table.py`` checks them against the table.
"""

from __future__ import annotations

from hermes_nb import command_table
from hermes_nb.model_test.runner import rl_test_inference as rl_test_inference
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
from hermes_nb.selection.current import current_run_config as current_run_config
from hermes_nb.selection.current import current_state as current_state
from hermes_nb.selection.current import ensure_started as ensure_started

__all__ = sorted([*(command.name for command in command_table.exported()), "current_run_config", "current_state",
                  "ensure_started"])  # fmt: skip
