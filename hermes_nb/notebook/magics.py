"""The ``%rl_*`` magics, made from the command table (``hermes_nb.command_table``): parse the line, call the core
(through ``run_sync`` when it is a coroutine), return its result for the cell to show.

No magic has a body of its own, so anything a magic does, ``await rl_*()`` does too. A user mistake
(``HermesNBError``) becomes IPython's ``UsageError``: one line, no traceback. A magic given no run passes the
kernel's run (``notebook/kernel_runs.py``), and one that starts a run remembers it as that run. Options live on the
``HermesNB`` configurable, so ``%config HermesNB.home = "/data/rl"`` works like any IPython option.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, magics_class
from IPython.core.magic_arguments import MagicArgumentParser
from traitlets import Float, Unicode, observe

from hermes_nb import command_table
from hermes_nb.command_table import Command
from hermes_nb.errors import HermesNBError
from hermes_nb.notebook import kernel_runs
from hermes_nb.notebook.widgets.live_plot import DEFAULT_REFRESH_INTERVAL_S
from hermes_nb.notebook.widgets.monitor import DEFAULT_STATUS_INTERVAL_S
from hermes_nb.syncio import run_sync
from hermes_nb.system import home
from hermes_nb.system.home import ENV_PYTHON_VAR


@magics_class
class HermesNB(Magics):
    """The options of the hermes-nb magics: ``%config HermesNB``. The magics themselves come from the command table."""

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


def command_magic(command: Command, options: HermesNB) -> Callable[[str], Any]:
    """The line magic of ``command``; ``options`` are the ``%config HermesNB`` values it may pass to the core."""
    parser = magic_parser(command)

    def magic(line: str) -> Any:
        try:
            return _run(command, parser, options, line)
        except HermesNBError as exc:
            raise UsageError(str(exc)) from None

    magic.__name__ = magic.__qualname__ = str(command.magic)
    magic.__doc__ = f"{command.help}\n\n{parser.format_help()}"  # what `%rl_logs?` shows
    return magic


def magic_parser(command: Command) -> MagicArgumentParser:
    # MagicArgumentParser raises UsageError on a bad line instead of exiting.
    parser = MagicArgumentParser(prog=f"%{command.magic}", description=command.help)
    for argument in command.arguments_for("magic"):
        argument.add_to(parser)
    return parser


def _run(command: Command, parser: MagicArgumentParser, options: HermesNB, line: str) -> Any:
    kwargs = command.core_arguments("magic", _parsed(command, parser, line))
    kwargs.update({param: getattr(options, option) for param, option in command.magic_options.items()})
    value = command.core()(**kwargs)
    result = run_sync(value) if inspect.iscoroutine(value) else value
    if command.starts_run:
        kernel_runs.remember_started(result.run_id)
    return result


def _parsed(command: Command, parser: MagicArgumentParser, line: str) -> dict[str, Any]:
    arguments = command.arguments_for("magic")
    if not arguments and line.strip():
        raise HermesNBError(f"%{command.magic} takes no arguments (got {line.strip()!r})")
    parsed = vars(parser.parse_argstring(line))
    for argument in arguments:
        if argument.kernel_run:
            parsed[argument.dest] = kernel_runs.default_run(parsed.get(argument.dest))
    return parsed


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext hermes_nb``: register the magics and make ``%config HermesNB`` know the options."""
    options = HermesNB(shell=ipython)
    ipython.register_magics(options)
    for command in command_table.magics():
        ipython.register_magic_function(command_magic(command, options), "line", command.magic)
    # Loading twice replaces the instance, so %config sets the options of the magics that run.
    ipython.configurables[:] = [c for c in ipython.configurables if not isinstance(c, HermesNB)] + [options]
