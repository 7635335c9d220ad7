"""The command table: every public command of hermes-nb, declared once.

A ``Command`` names its core function (by module, imported only when called, so ``import hermes_nb`` and
``hermes-nb --help`` stay fast), its one-line help, its arguments with their types and help, and the front ends
it has: a public name of ``hermes_nb`` (``export``), an LLM-agent tool (``tool``, ``hermes_nb.tools``), a ``%magic``
(``hermes_nb.notebook.magics``) and a ``hermes-nb`` subcommand (``hermes_nb.cli``). Each front end is made from
this table, and none names a command by hand: adding an ``rl_*`` call is one ``Command`` here.

An ``Argument`` is one parameter of the core function as a front end's line gives it: a positional argument, an
option (``--steps 2``) or a flag (``--worst``); a text parsed into the core's value where the core takes another
shape (``FIELD=VALUE`` items -> a mapping). An argument left out is not passed, so the core function's own default,
written only there, applies. Front ends parse, call the core, and render; what one does besides (a magic remembers
the run it started, the CLI prints a started run's id alone and follows it with ``--wait``) is a fact declared
here (``starts_run``), acted on by that front end.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from hermes_nb.errors import HermesNBError

if TYPE_CHECKING:
    import argparse

FrontEnd = Literal["magic", "cli"]
BOTH: frozenset[FrontEnd] = frozenset({"magic", "cli"})
MAGIC_ONLY: frozenset[FrontEnd] = frozenset({"magic"})
CLI_ONLY: frozenset[FrontEnd] = frozenset({"cli"})


class _LeftOut:
    """The default of an argument that is not passed when left out (the core's own default applies)."""

    def __repr__(self) -> str:
        return "LEFT_OUT"


LEFT_OUT: Any = _LeftOut()


def _assignments(items: list[str]) -> dict[str, str]:
    from hermes_nb.selection.editing import parse_assignments

    return parse_assignments(items)


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [name.strip() for name in text.split(",") if name.strip()]


def _grid(items: list[str]) -> dict[str, list[str]]:
    from hermes_nb.runs.sweeps.variants import parse_grid_items

    return parse_grid_items(items)


def _stop_rule(text: str) -> dict[str, str]:
    """``10:15`` -> stop a run at step 10 when its held-out accuracy is more than 15 points below the best."""
    step, sep, points = text.partition(":")
    if not sep:
        raise HermesNBError(f"--stop-if: STEP:POINTS (e.g. 10:15), got {text!r}")
    return {"step": step.strip(), "below_best_by": points.strip()}


# `hermes-nb estimate`'s exit status when the run cannot fit: 1 and 2 are taken (a followed run failed, a user
# error), and a script that checks before it starts tells "too big" from "wrong field" by the code alone.
EXIT_CANNOT_FIT = 3


def _cannot_fit(estimate: Any) -> bool:
    return not estimate.fits


def _words(words: list[str]) -> str:
    return " ".join(words)


def _models(text: str | None) -> list[str] | None:
    from hermes_nb.model_test.targets import split_models

    return split_models(text)


@dataclass(frozen=True)
class Argument:
    param: str  # the core function's parameter this argument fills
    help: str
    flags: tuple[str, ...] = ()  # option strings ("--process", "-p"); none: a positional argument
    nargs: Literal["?", "*", "+"] | None = None
    type: Callable[[str], Any] | None = None  # int, float; None: text
    metavar: str | None = None
    const: Any = None  # not None: a flag, which passes this value when given
    default: Any = LEFT_OUT  # an option's value when left out; LEFT_OUT: not passed at all
    parse: Callable[[Any], Any] | None = None  # the line's value -> the core's (text -> a list, a mapping)
    spread: bool = False  # the parsed mapping is passed as keyword arguments (``**overrides``)
    kernel_run: bool = False  # a run id: a magic given none passes the kernel's run (notebook/kernel_runs.py)
    front_ends: frozenset[FrontEnd] = BOTH
    passed: bool = True  # False: read by the front end (``--wait`` of ``start``), not passed to the core

    @property
    def dest(self) -> str:
        """The name of the parsed value: the parameter for a positional, the first long flag for an option."""
        if not self.flags:
            return self.param
        long = [flag for flag in self.flags if flag.startswith("--")]
        return (long or list(self.flags))[0].lstrip("-").replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        """Declare this argument on an ``argparse`` parser (a magic's or a subcommand's)."""
        import argparse

        options: dict[str, Any] = {"help": self.help}
        if self.metavar is not None:
            options["metavar"] = self.metavar
        if not self.flags:
            parser.add_argument(self.param, nargs=self.nargs, **options)
            return
        default = argparse.SUPPRESS if self.default is LEFT_OUT else self.default
        if self.const is not None:
            parser.add_argument(*self.flags, dest=self.dest, action="store_const", const=self.const, default=default,
                                **options)  # fmt: skip
            return
        if self.type is not None:
            options["type"] = self.type
        parser.add_argument(*self.flags, dest=self.dest, nargs=self.nargs, default=default, **options)


@dataclass(frozen=True)
class ExitStatus:
    """A subcommand's exit status when its core answered and the answer is one a script must not read as success
    (the run it asks about cannot fit): ``code`` where ``applies(result)``, said in the subcommand's ``--help``."""

    code: int
    applies: Callable[[Any], bool]
    help: str  # when it is returned, as --help says it: "the run cannot fit in the memory free now"


@dataclass(frozen=True)
class Command:
    name: str  # the core function's name in ``module``: ``rl_*`` for a public one
    module: str
    help: str  # one line: the magic's first docstring line, the subcommand's help
    arguments: tuple[Argument, ...] = ()
    magic: str | None = None  # the %magic's name; None: no magic
    cli: str | None = None  # the hermes-nb subcommand's name; None: no subcommand
    export: bool = True  # a public name of hermes_nb (and of hermes_nb.api)
    tool: bool = True  # an LLM-agent tool (hermes_nb.tools)
    starts_run: bool = False  # the result is a started run (StartResult)
    magic_options: Mapping[str, str] = field(default_factory=dict)  # core parameter <- HermesNB option
    exit_status: ExitStatus | None = None  # the CLI's non-zero exit for an answer (see ExitStatus)

    def core(self) -> Callable[..., Any]:
        """The core function, looked up at each call (so a test that replaces it in its module is obeyed)."""
        function: Callable[..., Any] = getattr(importlib.import_module(self.module), self.name)
        return function

    def arguments_for(self, front_end: FrontEnd) -> tuple[Argument, ...]:
        return tuple(argument for argument in self.arguments if front_end in argument.front_ends)

    def core_arguments(self, front_end: FrontEnd, parsed: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments of the core call, from a front end's parsed values (``dest`` -> value)."""
        kwargs: dict[str, Any] = {}
        given: dict[str, Argument] = {}
        for argument in self.arguments_for(front_end):
            if not argument.passed or argument.dest not in parsed:
                continue
            value = parsed[argument.dest]
            if value is None and argument.default is LEFT_OUT:
                continue  # left out: the core's own default
            earlier = given.setdefault(argument.param, argument)
            if earlier is not argument:
                raise HermesNBError(f"give {earlier.flags[0]} or {argument.flags[0]}, not both")
            value = argument.parse(value) if argument.parse is not None else value
            if argument.spread:
                kwargs.update(value)
            else:
                kwargs[argument.param] = value
        return kwargs


RUN = Argument(
    "run_id",
    "run id (default: the newest run; in a notebook, the latest run started from it if any)",
    nargs="?",
    metavar="run",
    kernel_run=True,
)
SELECTION = "hermes_nb.selection.commands"
RUNS = "hermes_nb.runs.commands"
SWEEPS = "hermes_nb.runs.sweeps.commands"
SWEEP = Argument("sweep_id", "sweep id (default: the newest sweep)", nargs="?", metavar="sweep")

COMMANDS: tuple[Command, ...] = (
    Command(
        "rl_list_environments", SELECTION, "List the environments on the search path (shipped and HERMES_NB_ENV_PATH).",
        magic="rl_list", cli="list",
    ),
    Command(
        "rl_select_environment", SELECTION, "Select an environment and load its default config.",
        (Argument("name", "environment name, as %rl_list shows it"),),
        magic="rl_select", cli="select",
    ),
    Command(
        "rl_get_current_config", SELECTION,
        "Show the current config: editable fields with constraints, and locked fields.",
        magic="rl_config", cli="config",
    ),
    Command(
        "rl_edit_config", SELECTION, "Change config fields, all or nothing: if one value is refused, nothing changes.",
        (Argument("field", "e.g. group_size=8 trainer.learning_rate=1e-4", nargs="+", metavar="FIELD=VALUE",
                  parse=_assignments),),
        magic="rl_edit", cli="edit",
    ),
    Command(
        "rl_load_config", SELECTION, "Apply a YAML config file (configs/quick_test.yaml ...) or a shipped config "
        "by name (quickstart).",
        (Argument("path", "the YAML file (sections env, trainer, wandb; optional environment: NAME) or a shipped "
                  "config's name", metavar="file"),),
        magic="rl_load", cli="load",
    ),
    Command("rl_reset_config", SELECTION, "Reset the config to the environment's defaults.", cli="reset"),
    Command(
        "copy_examples", "hermes_nb.selection.examples", "Copy the example notebooks into a directory to run them.",
        (Argument("directory", "where to copy them (made if missing)", metavar="DIR"),),
        cli="examples", export=False, tool=False,
    ),
    Command(
        "rl_start_training", RUNS, "Start a training run of the selected environment with the current config.",
        (
            Argument("overrides", "config overrides for this run only, e.g. total_steps=20", nargs="*",
                     metavar="FIELD=VALUE", parse=_assignments, spread=True),
            Argument("resume_from", "continue a stopped or failed run", flags=("--resume-from",), metavar="RUN",
                     front_ends=CLI_ONLY),
            Argument("wait", "follow the run until it ends; exit 1 if it failed", flags=("--wait",), const=True,
                     default=False, front_ends=CLI_ONLY, passed=False),
        ),
        magic="rl_start", cli="start", starts_run=True,
    ),
    Command(
        "rl_estimate_run", RUNS, "Before starting: memory per process against what is free, time, tokens and price.",
        (Argument("overrides", "config overrides, as for start, e.g. group_size=32", nargs="*",
                  metavar="FIELD=VALUE", parse=_assignments, spread=True),),
        magic="rl_estimate", cli="estimate",
        exit_status=ExitStatus(EXIT_CANNOT_FIT, _cannot_fit, "the run cannot fit in the memory free now"),
    ),
    Command(
        "rl_check_status", RUNS, "Status of a run: progress, ETA, processes, latest metrics, errors.", (RUN,),
        magic="rl_status", cli="status",
    ),
    Command(
        "rl_stop_training", RUNS, "Stop a run gracefully (a final checkpoint is saved first).",
        (RUN, Argument("wait", "ask the run to stop and return at once", flags=("--no-wait",), const=False,
                       front_ends=CLI_ONLY)),
        magic="rl_stop", cli="stop",
    ),
    Command("rl_list_runs", RUNS, "Every run in this home, newest first.", cli="runs"),
    Command(
        "rl_compare_runs", RUNS,
        "The runs table: status, what differs from a baseline run, best and last held-out accuracy and reward, "
        "steps, wall time, sweep and note; sortable.",
        (
            Argument("runs", "run ids (default: every run)", nargs="*", metavar="RUN"),
            Argument("baseline", "the run the differences are against (default: the oldest run shown)",
                     flags=("--baseline",), metavar="RUN"),
            Argument("sort_by", "created, best_eval, last_eval, best_reward, last_reward, steps, wall, run, status, "
                     "environment, sweep or note", flags=("--sort-by",)),
            Argument("descending", "smallest first", flags=("--ascending",), const=False),
            Argument("sweep", "only the runs of this sweep", flags=("--sweep",), metavar="SWEEP"),
        ),
        cli="compare",
    ),
    Command(
        "rl_tag_run", RUNS, "Set a run's note, shown in the runs table (an empty note removes it).",
        (Argument("run_id", "run id", metavar="run"),
         Argument("note", "the note: one line of text", nargs="*", metavar="NOTE", parse=_words)),
        magic="rl_tag", cli="tag",
    ),
    Command(
        "rl_delete_run", RUNS, "Delete (or archive) a run's directory and its logs; never a live run.",
        (
            Argument("run_id", "run id", metavar="run"),
            Argument("confirm", "really delete (without it: what would go, nothing changes)", flags=("--yes",),
                     const=True),
            Argument("archive", "move to <home>/archive instead of deleting", flags=("--archive",), const=True),
        ),
        magic="rl_delete", cli="delete",
    ),
    Command(
        "runs_table", "hermes_nb.notebook.widgets.runs_table",
        "The runs table as a widget: sortable columns, checkboxes that overlay the chosen runs in a live plot "
        "labelled by what differs, delete and archive with a confirmation.",
        (Argument("sweep", "only the runs of this sweep", flags=("--sweep",), metavar="SWEEP"),),
        magic="rl_runs", export=False, tool=False,
    ),
    Command(
        "rl_sweep", SWEEPS,
        "Run a grid of config overrides as normal runs, one after another (or N at a time), by a detached driver "
        "that outlives the kernel.",
        (
            Argument("grid", "e.g. trainer.learning_rate=1e-4,3e-4 env.group_size=8,16", nargs="+",
                     metavar="FIELD=V1,V2", parse=_grid),
            Argument("max_concurrent", "runs at once", flags=("--max-concurrent",), type=int),
            Argument("stop_if", "stop a run whose held-out accuracy at STEP is more than POINTS below the best's",
                     flags=("--stop-if",), metavar="STEP:POINTS", parse=_stop_rule),
            Argument("name", "a name for the sweep", flags=("--name",)),
            Argument("stop_on_health", "stop a variant's run on these health findings, e.g. "
                     "entropy_collapse,no_signal", flags=("--stop-on-health",), metavar="NAMES", parse=_names),
        ),
        magic="rl_sweep", cli="sweep",
    ),
    Command(
        "rl_sweep_status", SWEEPS, "A sweep's progress: each variant's run and accuracy, and the best variant.",
        (SWEEP,), magic="rl_sweep_status", cli="sweep-status",
    ),
    Command(
        "rl_stop_sweep", SWEEPS, "Stop a sweep: its live runs stop gracefully and no more variants start.",
        (SWEEP, Argument("wait", "ask the sweep to stop and return at once", flags=("--no-wait",), const=False,
                         front_ends=CLI_ONLY)),
        magic="rl_stop_sweep", cli="stop-sweep",
    ),
    Command(
        "rl_tail_logs", RUNS, "The last lines of one process's log.",
        (
            RUN,
            Argument("process", "api, trainer, env or supervisor (default: the trainer's log)",
                     flags=("--process", "-p")),
            Argument("lines", "how many lines", flags=("-n", "--lines"), type=int),
        ),
        magic="rl_logs", cli="logs",
    ),
    Command(
        "rl_get_results", RUNS, "Final and best metrics, checkpoints and final weights of a run.", (RUN,),
        magic="rl_results", cli="results",
    ),
    Command(
        "rl_get_samples", "hermes_nb.rollouts.commands",
        "The sampled conversations of a step with their scores and advantages (tool calls and results shown).",
        (
            RUN,
            Argument("step", "trainer step (default: the last recorded)", flags=("--step",), type=int),
            Argument("order", "lowest scores first", flags=("--worst",), const="worst"),
            Argument("order", "highest scores first", flags=("--best",), const="best"),
            Argument("n", "how many samples", flags=("-n",), type=int),
            Argument("min_score", "only samples scored at least this", flags=("--min-score",), type=float),
            Argument("max_score", "only samples scored at most this", flags=("--max-score",), type=float),
        ),
        magic="rl_samples",
    ),
    Command(
        "rl_test_inference", "hermes_nb.model_test.runner",
        "Sample and score a few groups from the selected environment without training: each model's accuracy, "
        "format failures, latency and tokens, and a bar chart of accuracy.",
        (
            Argument("num_steps", "groups per model", flags=("--steps",), type=int),
            Argument("group_size", "completions per group", flags=("--group-size",), type=int),
            Argument("models", "comma-separated: embedded, run ids, model dirs, endpoints, hosted ids org/model "
                     "(default: hosted small/medium/large with OPENROUTER_API_KEY, and the base model)",
                     flags=("--models",), default=None, parse=_models),
        ),
        magic="rl_test", cli="test",
    ),
    Command(
        "watch", "hermes_nb.notebook.watch", "Live metrics plot (reward, held-out accuracy, completion length, KL or "
        "entropy) that refreshes until the runs end.",
        (
            Argument("runs", "run ids or entity/project/run W&B paths (default: the kernel's run)", nargs="*",
                     metavar="RUN"),
            Argument("smoothing", "EMA weight of the past, 0 (raw) to 0.99", flags=("--smoothing",), type=float),
            Argument("wait", "block until every run has ended (for headless notebooks)", flags=("--wait",),
                     const=True),
            Argument("timeout", "with --wait: give up waiting after this many seconds", flags=("--timeout",),
                     type=float),
            Argument("panels", "four panels, comma-separated (default reward,eval,length,kl; also loss, entropy, "
                     "train_correct, clip_fraction, learning_rate)", flags=("--panels",), parse=_names),
        ),
        magic="rl_watch", export=False, tool=False, magic_options={"interval_s": "refresh_interval"},
    ),
)  # fmt: skip


def exported() -> tuple[Command, ...]:
    return tuple(command for command in COMMANDS if command.export)


def tools() -> tuple[Command, ...]:
    return tuple(command for command in COMMANDS if command.tool)


def magics() -> tuple[Command, ...]:
    return tuple(command for command in COMMANDS if command.magic is not None)


def subcommands() -> tuple[Command, ...]:
    return tuple(command for command in COMMANDS if command.cli is not None)
