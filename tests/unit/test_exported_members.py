"""The public API of `hermes_nb` is pinned: a change here is a deliberate change of the public surface."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import hermes_nb

REPO_ROOT = Path(__file__).resolve().parents[2]

EXPECTED = {
    "BaseEnv",
    "BaseEnvConfig",
    "HermesNBError",
    "ScoredDataGroup",
    "StopRule",
    "__version__",
    "dashboard",
    "load_ipython_extension",
    "rl_check_status",
    "rl_compare_runs",
    "rl_delete_run",
    "rl_edit_config",
    "rl_estimate_run",
    "rl_get_current_config",
    "rl_get_results",
    "rl_get_samples",
    "rl_list_environments",
    "rl_list_runs",
    "rl_load_config",
    "rl_reset_config",
    "rl_select_environment",
    "rl_start_training",
    "rl_stop_sweep",
    "rl_stop_training",
    "rl_sweep",
    "rl_sweep_status",
    "rl_tag_run",
    "rl_tail_logs",
    "rl_test_inference",
    "run_sync",
    "save_metrics_plot",
}
LIFECYCLE = (
    "rl_start_training",
    "rl_check_status",
    "rl_stop_training",
    "rl_list_runs",
    "rl_get_results",
    "rl_tail_logs",
)


def test_all_is_pinned() -> None:
    assert set(hermes_nb.__all__) == EXPECTED


def test_every_public_name_resolves() -> None:
    for name in hermes_nb.__all__:
        assert getattr(hermes_nb, name) is not None, name
    assert set(hermes_nb.__all__) <= set(dir(hermes_nb))


def test_public_names_are_the_real_objects() -> None:
    from hermes_nb import api, env, errors, syncio

    assert hermes_nb.rl_edit_config is api.rl_edit_config
    assert hermes_nb.BaseEnv is env.BaseEnv
    assert hermes_nb.HermesNBError is errors.HermesNBError
    assert hermes_nb.run_sync is syncio.run_sync


def test_notebook_layer_names_are_the_real_objects() -> None:
    from hermes_nb import notebook, plotting

    assert hermes_nb.dashboard is notebook.dashboard
    assert hermes_nb.save_metrics_plot is plotting.save_metrics_plot


def test_lifecycle_functions_are_the_run_commands_reexported() -> None:
    from hermes_nb import api
    from hermes_nb.runs import commands as runs_commands

    for name in LIFECYCLE:
        assert getattr(hermes_nb, name) is getattr(runs_commands, name) is getattr(api, name), name
        assert inspect.iscoroutinefunction(getattr(hermes_nb, name)), name


def test_the_run_commands_import_without_the_public_api() -> None:
    # hermes_nb.api imports hermes_nb.runs.commands at its end; the reverse would be an import cycle.
    code = "import sys, hermes_nb.runs.commands; print('hermes_nb.api' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_unknown_names_raise_attribute_error() -> None:
    try:
        hermes_nb.no_such_thing  # noqa: B018 - the access is the test
    except AttributeError as exc:
        assert "no_such_thing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")
