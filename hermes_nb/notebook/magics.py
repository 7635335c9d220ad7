"""The ``%rl_*`` magics: parse the line, call the async core through ``run_sync``, return its result.

Every magic is a few lines over a plain ``rl_*`` coroutine, so anything a magic does, ``await rl_*()`` does too.
A user mistake (``HermesNBError``) becomes IPython's ``UsageError``: one line, no traceback. Options live on
the ``HermesNB`` configurable, so ``%config HermesNB.home = "/data/rl"`` works like any IPython option.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Float, Unicode, observe

from hermes_nb.errors import HermesNBError
from hermes_nb.notebook import kernel_runs
from hermes_nb.notebook.live_plot import DEFAULT_REFRESH_INTERVAL_S, LivePlot
from hermes_nb.notebook.widgets.monitor import DEFAULT_STATUS_INTERVAL_S
from hermes_nb.syncio import run_sync
from hermes_nb.system import home
from hermes_nb.system.home import ENV_PYTHON_VAR

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def user_errors(func: F) -> F:
    """A ``HermesNBError`` leaves the magic as a one-line ``UsageError`` (IPython shows no traceback for it)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except HermesNBError as exc:
            raise UsageError(str(exc)) from None

    return wrapper  # type: ignore[return-value]


def call(coro: Coroutine[Any, Any, T]) -> T:
    return run_sync(coro)


# An option left out is absent from the parsed arguments, so the core function's own default (written only
# there) applies.
NOT_GIVEN = argparse.SUPPRESS


@magics_class
class HermesNB(Magics):
    """hermes-nb magics; options: ``%config HermesNB``."""

    home = Unicode("", help="hermes-nb home (runs, logs, session); sets HERMES_NB_HOME. Empty: unchanged.").tag(
        config=True
    )
    refresh_interval = Float(
        DEFAULT_REFRESH_INTERVAL_S, min=0.1, help="Seconds between live metrics plot refreshes."
    ).tag(config=True)
    status_interval = Float(DEFAULT_STATUS_INTERVAL_S, min=0.2, help="Seconds between run monitor refreshes.").tag(
        config=True
    )
    env_python = Unicode(
        "",
        help="The Python that reads and runs atroposlib environments (one with atroposlib installed); sets "
        f"{ENV_PYTHON_VAR}. Empty: hermes-nb's own interpreter.",
    ).tag(config=True)

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self._apply_home(self.home)
        if self.env_python:  # left empty, a value set outside the kernel stands
            self._apply_env_python(self.env_python)

    @observe("env_python")
    def _env_python_changed(self, change: Any) -> None:
        self._apply_env_python(change["new"])

    @staticmethod
    def _apply_env_python(value: str) -> None:
        """The variable the core reads, so selection and runs started from this kernel use the interpreter."""
        if value.strip():
            os.environ[ENV_PYTHON_VAR] = str(Path(value.strip()).expanduser())
        else:
            os.environ.pop(ENV_PYTHON_VAR, None)

    @observe("home")
    def _home_changed(self, change: Any) -> None:
        self._apply_home(change["new"])

    @staticmethod
    def _apply_home(value: str) -> None:
        if value:
            os.environ[home.HOME_ENV_VAR] = str(Path(value).expanduser())

    # ------------------------------------------------------------ environments and config

    @line_magic
    @user_errors
    def rl_list(self, line: str) -> Any:
        """List the environments found (shipped and on HERMES_NB_ENV_PATH)."""
        from hermes_nb.api import rl_list_environments

        self._no_arguments("rl_list", line)
        return call(rl_list_environments())

    @line_magic
    @magic_arguments()
    @argument("name", help="environment name, as %rl_list shows it")
    @user_errors
    def rl_select(self, line: str) -> Any:
        """Select an environment and load its default config."""
        from hermes_nb.api import rl_select_environment

        args = parse_argstring(self.rl_select, line)
        return call(rl_select_environment(args.name))

    @line_magic
    @user_errors
    def rl_config(self, line: str) -> Any:
        """Show the current config: editable fields with constraints, and locked fields."""
        from hermes_nb.api import rl_get_current_config

        self._no_arguments("rl_config", line)
        return call(rl_get_current_config())

    @line_magic
    @magic_arguments()
    @argument("assignments", nargs="+", metavar="field=value", help="e.g. group_size=8 trainer.learning_rate=1e-4")
    @user_errors
    def rl_edit(self, line: str) -> Any:
        """Change config fields, all or nothing: if one value is refused, nothing changes."""
        from hermes_nb.api import rl_edit_config
        from hermes_nb.selection.editing import parse_assignments

        args = parse_argstring(self.rl_edit, line)
        return call(rl_edit_config(parse_assignments(args.assignments)))

    # ------------------------------------------------------------ runs

    @line_magic
    @magic_arguments()
    @argument("overrides", nargs="*", metavar="field=value", help="for this run only, e.g. total_steps=20")
    @user_errors
    def rl_start(self, line: str) -> Any:
        """Start a training run of the selected environment with the current config."""
        from hermes_nb.runs.api import rl_start_training
        from hermes_nb.selection.editing import parse_assignments

        args = parse_argstring(self.rl_start, line)
        result = call(rl_start_training(**parse_assignments(args.overrides)))
        kernel_runs.remember_started(result.run_id)
        return result

    @line_magic
    @magic_arguments()
    @argument("run", nargs="?", help="run id (default: the latest run started here, else the newest)")
    @user_errors
    def rl_status(self, line: str) -> Any:
        """Status of a run: progress, ETA, processes, latest metrics, errors."""
        from hermes_nb.runs.api import rl_check_status

        args = parse_argstring(self.rl_status, line)
        return call(rl_check_status(kernel_runs.default_run(args.run)))

    @line_magic
    @magic_arguments()
    @argument("run", nargs="?", help="run id (default: the latest run started here, else the newest)")
    @user_errors
    def rl_stop(self, line: str) -> Any:
        """Stop a run gracefully (a final checkpoint is saved first)."""
        from hermes_nb.runs.api import rl_stop_training

        args = parse_argstring(self.rl_stop, line)
        return call(rl_stop_training(kernel_runs.default_run(args.run)))

    @line_magic
    @user_errors
    def rl_runs(self, line: str) -> Any:
        """Every run in this home, newest first."""
        from hermes_nb.runs.api import rl_list_runs

        self._no_arguments("rl_runs", line)
        return call(rl_list_runs())

    @line_magic
    @magic_arguments()
    @argument("run", nargs="?", help="run id (default: the latest run started here, else the newest)")
    @argument("--process", "-p", default=NOT_GIVEN, help="trainer, env, api or supervisor (default: the trainer's log)")
    @argument("-n", "--lines", type=int, default=NOT_GIVEN, help="how many lines")
    @user_errors
    def rl_logs(self, line: str) -> Any:
        """The last lines of one process's log."""
        from hermes_nb.runs.api import rl_tail_logs

        options = vars(parse_argstring(self.rl_logs, line))
        run = kernel_runs.default_run(options.pop("run"))
        return call(rl_tail_logs(run, **options))

    @line_magic
    @magic_arguments()
    @argument("run", nargs="?", help="run id (default: the latest run started here, else the newest)")
    @user_errors
    def rl_results(self, line: str) -> Any:
        """Final and best metrics, checkpoints and final weights of a run."""
        from hermes_nb.runs.api import rl_get_results

        args = parse_argstring(self.rl_results, line)
        return call(rl_get_results(kernel_runs.default_run(args.run)))

    @line_magic
    @magic_arguments()
    @argument("run", nargs="?", help="run id (default: the latest run started here, else the newest)")
    @argument("--step", type=int, default=NOT_GIVEN, help="trainer step (default: the last recorded)")
    @argument("--worst", action="store_true", help="lowest scores first")
    @argument("--best", action="store_true", help="highest scores first")
    @argument("-n", type=int, default=NOT_GIVEN, help="how many samples")
    @argument("--min-score", type=float, default=NOT_GIVEN, help="only samples scored at least this")
    @argument("--max-score", type=float, default=NOT_GIVEN, help="only samples scored at most this")
    @user_errors
    def rl_samples(self, line: str) -> Any:
        """The sampled conversations of a step with their scores and advantages (tool calls and results shown)."""
        from hermes_nb.rollouts.api import rl_get_samples

        options = vars(parse_argstring(self.rl_samples, line))
        worst, best = options.pop("worst"), options.pop("best")
        if worst and best:
            raise HermesNBError("%rl_samples: give --worst or --best, not both")
        if worst or best:
            options["order"] = "worst" if worst else "best"
        run = kernel_runs.default_run(options.pop("run"))
        return call(rl_get_samples(run, **options))

    @line_magic
    @magic_arguments()
    @argument("--steps", dest="num_steps", type=int, default=NOT_GIVEN, help="inference steps")
    @argument("--group-size", type=int, default=NOT_GIVEN, help="completions per prompt")
    @argument(
        "--models",
        default=None,
        help="comma-separated models to compare (default: small, medium and large hosted models when "
        "OPENROUTER_API_KEY is set, and the base model)",
    )
    @user_errors
    def rl_test(self, line: str) -> Any:
        """Sample and score a few groups from the selected environment without training: a table of each model's
        accuracy, format failures, latency and tokens, and a bar chart of accuracy."""
        import hermes_nb.api as api

        options = vars(parse_argstring(self.rl_test, line))
        test = getattr(api, "rl_test_inference", None)
        if test is None:
            raise HermesNBError("inference testing (rl_test_inference) is not available in this version")
        from hermes_nb.model_test.targets import split_models

        return call(test(models=split_models(options.pop("models")), **options))

    @line_magic
    @magic_arguments()
    @argument("runs", nargs="*", metavar="RUN", help="run ids or entity/project/run W&B paths (default: latest)")
    @argument("--smoothing", type=float, default=0.0, help="EMA weight of the past, 0 (raw) to 0.99")
    @argument("--wait", action="store_true", help="block until every run has ended (for headless notebooks)")
    @argument("--timeout", type=float, default=None, help="with --wait: give up waiting after this many seconds")
    @user_errors
    def rl_watch(self, line: str) -> Any:
        """Live metrics plot (reward, percent correct, loss) that refreshes until the runs end."""
        args = parse_argstring(self.rl_watch, line)
        runs = args.runs or [kernel_runs.require_run()]
        plot = LivePlot(runs, smoothing=args.smoothing, interval_s=self.refresh_interval)
        if not args.wait:
            return plot
        from IPython.display import display

        display(plot)
        plot.wait(args.timeout)
        return None

    @staticmethod
    def _no_arguments(name: str, line: str) -> None:
        if line.strip():
            raise HermesNBError(f"%{name} takes no arguments (got {line.strip()!r})")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext hermes_nb``: register the magics and make ``%config HermesNB`` know the options."""
    magics = HermesNB(shell=ipython)
    ipython.register_magics(magics)
    # Loading twice replaces the instance, so %config sets the options of the magics that run.
    ipython.configurables[:] = [c for c in ipython.configurables if not isinstance(c, HermesNB)] + [magics]
