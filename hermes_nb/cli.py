"""``hermes-nb``: a small command line over the same async core (and the same session) as the notebook.

    hermes-nb list                      environments on the search path
    hermes-nb select NAME               select one (its config is read in a child process)
    hermes-nb config                    current config: configurable and locked fields
    hermes-nb edit FIELD=VALUE ...      change fields, all or nothing
    hermes-nb load FILE                 apply a YAML config file (configs/quick_test.yaml ...)
    hermes-nb reset                     back to the selected environment's defaults

``--json`` prints the result's ``to_dict()``. A user error prints one line to stderr and exits with 2.
A subcommand is one ``Command`` in ``COMMANDS``: a name, a help line, its arguments and a coroutine factory.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from hermes_nb.errors import HermesNBError

EXIT_USER_ERROR = 2


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    # Builds the coroutine to run from the parsed arguments; imports the core lazily so `--help` stays fast.
    call: Callable[[argparse.Namespace], Coroutine[Any, Any, Any]]
    add_arguments: Callable[[argparse.ArgumentParser], object] = field(default=lambda parser: None)


def _parse_assignments(pairs: Sequence[str]) -> dict[str, str]:
    edits: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise HermesNBError(f"edit expects FIELD=VALUE (e.g. group_size=8), got {pair!r}")
        edits[name.strip()] = value
    return edits


def _list(args: argparse.Namespace) -> Coroutine[Any, Any, Any]:
    from hermes_nb import api

    return api.rl_list_environments()


def _select(args: argparse.Namespace) -> Coroutine[Any, Any, Any]:
    from hermes_nb import api

    return api.rl_select_environment(args.name)


def _config(args: argparse.Namespace) -> Coroutine[Any, Any, Any]:
    from hermes_nb import api

    return api.rl_get_current_config()


def _edit(args: argparse.Namespace) -> Coroutine[Any, Any, Any]:
    from hermes_nb import api

    return api.rl_edit_config(_parse_assignments(args.assignments))


def _load(args: argparse.Namespace) -> Coroutine[Any, Any, Any]:
    from hermes_nb import api

    return api.rl_load_config(args.file)


def _reset(args: argparse.Namespace) -> Coroutine[Any, Any, Any]:
    from hermes_nb import api

    return api.rl_reset_config()


COMMANDS: list[Command] = [
    Command("list", "list the environments on the search path", _list),
    Command("select", "select an environment", _select, lambda p: p.add_argument("name")),
    Command("config", "show the current config", _config),
    Command(
        "edit",
        "change config fields (all or nothing)",
        _edit,
        lambda p: p.add_argument("assignments", nargs="+", metavar="FIELD=VALUE"),
    ),
    Command("load", "apply a YAML config file", _load, lambda p: p.add_argument("file")),
    Command("reset", "reset the config to the environment's defaults", _reset),
]


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print the result as JSON")
    parser = argparse.ArgumentParser(prog="hermes-nb", description="RL training of language models, from Jupyter.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in commands:
        sub_parser = sub.add_parser(command.name, help=command.help, parents=[common])
        command.add_arguments(sub_parser)
        sub_parser.set_defaults(_command=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command: Command = args._command
    from hermes_nb.syncio import run_sync

    try:
        result = run_sync(command.call(args))
    except HermesNBError as exc:
        from hermes_nb.results import redact

        print(f"hermes-nb {command.name}: {redact(str(exc))}", file=sys.stderr)
        return EXIT_USER_ERROR
    print(json.dumps(result.to_dict(), indent=2, default=str) if args.json else str(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
