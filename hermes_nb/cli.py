"""``hermes-nb``: a small command line over the same async core (and the same session) as the notebook.

    hermes-nb list                      environments on the search path
    hermes-nb select NAME               select one (its config is read in a child process)
    hermes-nb config                    current config: configurable and locked fields
    hermes-nb edit FIELD=VALUE ...      change fields, all or nothing
    hermes-nb load FILE                 apply a YAML config file (configs/quick_test.yaml ...)
    hermes-nb reset                     back to the selected environment's defaults
    hermes-nb start [FIELD=VALUE ...]   start a run (overrides are not saved); prints its id
              [--resume-from RUN] [--wait]   --wait follows it to the end; exit 1 if it failed
    hermes-nb status [RUN]              status of a run (default: the newest)
    hermes-nb stop [RUN] [--no-wait]    stop a run gracefully (final checkpoint first)
    hermes-nb runs                      every run, newest first
    hermes-nb logs [RUN] [--process PROCESS] [-n LINES]   the trainer's log unless --process names another
    hermes-nb results [RUN]             final and best metrics, checkpoints, final weights

``--json`` prints the result's ``to_dict()``. A user error prints one line to stderr and exits with 2.
A subcommand is one ``Command`` in ``COMMANDS``: a name, a help line, its arguments, a coroutine factory and,
where printing the result is not the plain text or JSON form, a ``finish`` that prints it and picks the exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from hermes_nb.errors import HermesNBError

EXIT_USER_ERROR = 2
EXIT_RUN_FAILED = 1
EXIT_INTERRUPTED = 130
# How often `start --wait` reads the run's status: the files are local, so this is cheap; a person watching wants
# a line soon after each step.
FOLLOW_POLL_SECONDS = 2.0


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    # Builds the coroutine to run from the parsed arguments; imports the core lazily so `--help` stays fast.
    call: Callable[[argparse.Namespace], Coroutine[Any, Any, Any]]
    add_arguments: Callable[[argparse.ArgumentParser], object] = field(default=lambda parser: None)
    # Prints the result and returns the exit code; None prints the text (or --json) form and exits 0.
    finish: Callable[[Any, argparse.Namespace], int] | None = None


def _given(**options: Any) -> dict[str, Any]:
    """The options the user gave: one left out takes the core function's own default, written only there."""
    return {name: value for name, value in options.items() if value is not None}


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
    from hermes_nb.selection.editing import parse_assignments

    return api.rl_edit_config(parse_assignments(args.assignments))


def _load(args: argparse.Namespace) -> Coroutine[Any, Any, Any]:
    from hermes_nb import api

    return api.rl_load_config(args.file)


def _reset(args: argparse.Namespace) -> Coroutine[Any, Any, Any]:
    from hermes_nb import api

    return api.rl_reset_config()


def _start(args: argparse.Namespace) -> Coroutine[Any, Any, Any]:
    from hermes_nb import api
    from hermes_nb.selection.editing import parse_assignments

    overrides = parse_assignments(args.assignments)
    started = api.rl_start_training(args.resume_from, **overrides)
    return _start_and_follow(started) if args.wait else started


async def _start_and_follow(started: Coroutine[Any, Any, Any]) -> tuple[Any, Any]:
    """The start result and, once the run has ended, its final status (progress lines go to stderr)."""
    result = await started
    print(result.run_id, flush=True)
    return result, await follow_run(result.run_id)


async def follow_run(run_id: str, poll_seconds: float = FOLLOW_POLL_SECONDS) -> Any:
    """Poll the run's status until it is terminal, printing a line to stderr whenever it or its step changes."""
    from hermes_nb import api

    seen: tuple[str, int] | None = None
    while True:
        status = await api.rl_check_status(run_id)
        if (status.status, status.step) != seen:
            seen = (status.status, status.step)
            reward = status.metrics.reward_mean
            shown = "" if reward is None else f", reward {reward:.4g}"
            print(f"{run_id}: {status.status}, step {status.step}/{status.total_steps}{shown}", file=sys.stderr)
        if status.is_terminal:
            return status
        await asyncio.sleep(poll_seconds)


def _finish_start(result: Any, args: argparse.Namespace) -> int:
    if not args.wait:
        # The id alone on stdout, so that `RUN=$(hermes-nb start)` works; the details are for the person.
        print(json.dumps(result.to_dict(), indent=2, default=str) if args.json else result.run_id)
        if not args.json:
            print(str(result), file=sys.stderr)
        return 0
    _, final = result
    print(json.dumps(final.to_dict(), indent=2, default=str) if args.json else str(final))
    return EXIT_RUN_FAILED if final.status == "failed" else 0


def _status(args: argparse.Namespace) -> Coroutine[Any, Any, Any]:
    from hermes_nb import api

    return api.rl_check_status(args.run)


def _stop(args: argparse.Namespace) -> Coroutine[Any, Any, Any]:
    from hermes_nb import api

    return api.rl_stop_training(args.run, wait=not args.no_wait)


def _runs(args: argparse.Namespace) -> Coroutine[Any, Any, Any]:
    from hermes_nb import api

    return api.rl_list_runs()


def _logs(args: argparse.Namespace) -> Coroutine[Any, Any, Any]:
    from hermes_nb import api

    return api.rl_tail_logs(args.run, **_given(process=args.process, lines=args.lines))


def _results(args: argparse.Namespace) -> Coroutine[Any, Any, Any]:
    from hermes_nb import api

    return api.rl_get_results(args.run)


def _test(args: argparse.Namespace) -> Coroutine[Any, Any, Any]:
    from hermes_nb import api
    from hermes_nb.model_test.targets import split_models

    options = _given(num_steps=args.steps, group_size=args.group_size)
    return api.rl_test_inference(models=split_models(args.models), **options)


def _test_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, help="groups per model")
    parser.add_argument("--group-size", type=int, help="completions per group")
    parser.add_argument(
        "--models",
        default=None,
        help="comma-separated: embedded, run ids, model dirs, endpoints, hosted ids org/model "
        "(default: hosted small/medium/large with OPENROUTER_API_KEY, and the base model)",
    )


def _run_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", nargs="?", default=None, help="run id (default: the newest run)")


def _start_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("assignments", nargs="*", metavar="FIELD=VALUE", help="config overrides for this run only")
    parser.add_argument("--resume-from", metavar="RUN", default=None, help="continue a stopped or failed run")
    parser.add_argument("--wait", action="store_true", help="follow the run until it ends; exit 1 if it failed")


def _stop_arguments(parser: argparse.ArgumentParser) -> None:
    _run_argument(parser)
    parser.add_argument("--no-wait", action="store_true", help="ask the run to stop and return at once")


def _logs_arguments(parser: argparse.ArgumentParser) -> None:
    _run_argument(parser)
    parser.add_argument("--process", help="api, trainer, env or supervisor (default: the trainer's log)")
    parser.add_argument("-n", "--lines", type=int, help="how many lines")


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
    Command("start", "start a run with the current config", _start, _start_arguments, _finish_start),
    Command("status", "status of a run", _status, _run_argument),
    Command("stop", "stop a run gracefully", _stop, _stop_arguments),
    Command("runs", "list every run, newest first", _runs),
    Command("logs", "the last lines of a run's log", _logs, _logs_arguments),
    Command("results", "final and best metrics of a run", _results, _run_argument),
    Command(
        "test", "test the selected environment against models (base model, runs, endpoints)", _test, _test_arguments
    ),
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
        from hermes_nb.system.secrets import redact

        print(f"hermes-nb {command.name}: {redact(str(exc))}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        # Ctrl-C ends the command, never the run: a run belongs to its supervisor.
        print(f"hermes-nb {command.name}: interrupted; a started run keeps running", file=sys.stderr)
        return EXIT_INTERRUPTED
    if command.finish is not None:
        return command.finish(result, args)
    print(json.dumps(result.to_dict(), indent=2, default=str) if args.json else str(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
