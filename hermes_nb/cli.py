"""``hermes-nb``: a small command line over the same async core (and the same session) as the notebook.

    hermes-nb select arithmetic && hermes-nb load configs/quickstart.yaml && hermes-nb start --wait
    hermes-nb runs; hermes-nb status; hermes-nb logs --process trainer -n 50; hermes-nb results

``hermes-nb --help`` lists the subcommands, ``hermes-nb start --help`` one's arguments. ``--json`` prints the
result's ``to_dict()``. A user error prints one line to stderr and exits with 2. The subcommands are made from the
command table (``hermes_nb.command_table``): each parses its arguments, calls the core and prints the result; only a
command that starts a run (``starts_run``) prints differently: the run's id alone on stdout, and with ``--wait``
it follows the run to its end (exit 1 if it failed). A command whose answer a script must not read as success
declares its own exit status (``Command.exit_status``: ``estimate`` exits 3 when the run cannot fit), which its
``--help`` states.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

from hermes_nb import command_table
from hermes_nb.command_table import Command
from hermes_nb.errors import HermesNBError
from hermes_nb.selection import listeners

EXIT_USER_ERROR = 2
EXIT_RUN_FAILED = 1
EXIT_INTERRUPTED = 130
# How often `start --wait` reads the run's status: the files are local, so this is cheap; a person watching wants
# a line soon after each step.
FOLLOW_POLL_SECONDS = 2.0


def build_parser(table: Sequence[Command] | None = None) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print the result as JSON")
    parser = argparse.ArgumentParser(prog="hermes-nb", description="RL training of language models, from Jupyter.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in command_table.subcommands() if table is None else table:
        sub_parser = sub.add_parser(
            str(command.cli), help=command.help, description=command.help, epilog=_exit_help(command), parents=[common]
        )
        for argument in command.arguments_for("cli"):
            argument.add_to(sub_parser)
        sub_parser.set_defaults(_command=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command: Command = args._command
    from hermes_nb.syncio import run_sync

    try:
        with listeners.muted():  # a warm kit would end with this process, unused
            result = run_sync(command.core()(**command.core_arguments("cli", vars(args))))
        if command.starts_run:
            return print_started(result, args)
    except HermesNBError as exc:
        from hermes_nb.system.secrets import redact

        print(f"hermes-nb {command.cli}: {redact(str(exc))}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        # Ctrl-C ends the command, never the run: a run belongs to its supervisor.
        print(f"hermes-nb {command.cli}: interrupted; a started run keeps running", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(_shown(result, args))
    status = command.exit_status
    return status.code if status is not None and status.applies(result) else 0


def _exit_help(command: Command) -> str | None:
    status = command.exit_status
    if status is None:
        return None
    return f"Exit status: {status.code} when {status.help}; {EXIT_USER_ERROR} on a user error; else 0."


def print_started(result: Any, args: argparse.Namespace) -> int:
    """A started run: its id alone on stdout (``RUN=$(hermes-nb start)``), or with ``--wait`` its final status."""
    from hermes_nb.syncio import run_sync

    if not args.wait:
        print(_shown(result, args) if args.json else result.run_id)
        if not args.json:
            print(str(result), file=sys.stderr)  # the details are for the person
        return 0
    print(result.run_id, flush=True)
    final = run_sync(follow_run(result.run_id))
    print(_shown(final, args))
    return EXIT_RUN_FAILED if final.status == "failed" else 0


async def follow_run(run_id: str, poll_seconds: float = FOLLOW_POLL_SECONDS) -> Any:
    """Poll the run's status until it is terminal, printing a line to stderr whenever it or its step changes."""
    from hermes_nb.runs.commands import rl_check_status

    seen: tuple[str, int] | None = None
    while True:
        status = await rl_check_status(run_id)
        if (status.status, status.step) != seen:
            seen = (status.status, status.step)
            reward = status.metrics.reward_mean
            shown = "" if reward is None else f", reward {reward:.4g}"
            print(f"{run_id}: {status.status}, step {status.step}/{status.total_steps}{shown}", file=sys.stderr)
        if status.is_terminal:
            return status
        await asyncio.sleep(poll_seconds)


def _shown(result: Any, args: argparse.Namespace) -> str:
    return json.dumps(result.to_dict(), indent=2, default=str) if args.json else str(result)


if __name__ == "__main__":
    raise SystemExit(main())
