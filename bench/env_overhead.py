"""What an environment framework costs: CPU of the environment's processes per group, and wall time per step, of
the same task (2-digit addition) run natively, as an OpenEnv environment, as a verifiers environment and as a
reasoning-gym dataset, with the same run settings (model, group size, batch, steps, seed).

    .venv/bin/python bench/env_overhead.py [--repeats 2] [--first 10] [--last 60] [--only native openenv ...]
                                           [--output env_overhead.json]

Each framework is one row of ``FRAMEWORKS``: the environment a run selects and the settings that make it 2-digit
addition; a row whose side environment (``.venvs/<name>``, or ``SIDE_ENVS_DIR``) is not built, or whose environment
is not listed, is skipped with one line saying so. The rows run round-robin (native, openenv, ..., native, ...)
``--repeats`` times, each a short real run through the public API (``hermes_nb.api``) on the embedded chat model,
with its own ``HERMES_NB_HOME``. Between trainer steps ``--first`` and ``--last`` the CPU seconds of the run's
processes are read with psutil (``run_processes``: the environment process and what it started, which for OpenEnv
is its server: both count), and the groups the environment made in that time from ``env_metrics.jsonl``. A row's
ratio is its environment CPU per group over native's of the same round; the figures are medians over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from process_cpu import cpu_seconds, wait_for_step  # bench/, this script's folder
from run_processes import run_processes

ROOT = Path(__file__).resolve().parent.parent
# The bench's own environments (the OpenEnv addition server), put on the search path.
BENCH_ENVIRONMENTS = Path(__file__).resolve().parent / "environments"
ENV_ROLE = "env"
# What arithmetic's 2-digit answers need (a carry adds a digit, then the end-of-sequence token and one spare):
# every row samples at most this many tokens per completion.
COMPLETION_TOKENS = 5
# Every row's run: the same model (the chat one, which OpenEnv's and verifiers' chat episodes need), groups, batch
# and seed; flat groups kept (the embedded model rarely adds right, and a dropped group still cost its CPU); no
# evaluation or W&B in the measured steps.
RUN_SETTINGS: dict[str, Any] = {
    "trainer.base_model": "embedded-chat",
    "trainer.seed": 0,
    "env.seed": 0,
    "env.group_size": 8,
    "env.batch_size": 32,
    "env.max_num_workers": 4,
    "env.ensure_scores_are_not_same": False,
    "env.steps_per_eval": 0,
    "env.eval_items": 2,
    "env.use_wandb": False,
    "wandb.mode": "disabled",
}
# The environment-metric counters whose sum is the groups an environment made (posted, dropped or failed).
GROUP_COUNTERS = ("env/groups_posted", "env/groups_skipped", "env/failed_groups")
# reasoning-gym's basic_arithmetic as a + b, operands of one or two digits, no parentheses or signs.
BASIC_ADDITION = {
    "min_terms": 2,
    "max_terms": 2,
    "min_digits": 1,
    "max_digits": 2,
    "operators": ["+"],
    "allow_parentheses": False,
    "allow_negation": False,
}


@dataclass(frozen=True)
class Framework:
    """One row: the environment a run selects, the settings that make it 2-digit addition, and the side environment
    (its ``bin/python`` named by ``python_var``) it runs in, if any."""

    name: str
    environment: str
    settings: dict[str, Any] = field(default_factory=dict)
    side_env: str | None = None
    python_var: str | None = None


FRAMEWORKS = (
    Framework("native", "arithmetic", {"env.digits": 2, "env.operation": "add"}),
    Framework(
        "openenv",
        "addition_openenv",  # bench/environments/addition_openenv.py
        {"env.max_turns": 1, "env.max_turn_tokens": COMPLETION_TOKENS},
        side_env="openenv",
        python_var="HERMES_NB_OPENENV_PYTHON",
    ),
    # environments/addition_verifiers.py, a verifiers taskset of 2-digit addition, run in the verifiers side
    # environment through its train client, its episodes played by the default harness (hermes_nb_chat: in the
    # environment's process).
    Framework(
        "verifiers",
        "addition_verifiers",
        {"env.max_tokens": COMPLETION_TOKENS},
        side_env="verifiers",
        python_var="HERMES_NB_VERIFIERS_PYTHON",
    ),
    # basic_arithmetic restricted to a + b with operands of one or two digits: the closest of reasoning-gym's
    # datasets to arithmetic's task (chain_sum mixes in subtraction). Its question is a sentence ("Calculate
    # 5 + 33."), scored by the dataset's own score_answer.
    Framework(
        "reasoning_gym",
        "reasoning_gym",
        {
            "env.datasets": {"basic_arithmetic": 1.0},
            "env.dataset_params": {"basic_arithmetic": BASIC_ADDITION},
            "env.max_completion_tokens": COMPLETION_TOKENS,
        },
    ),
)


@dataclass
class Measured:
    framework: str
    round: int
    steps: int
    groups: int
    wall_s_per_step: float
    cpu_ms_per_group: dict[str, float]  # by role; ENV_ROLE + "/children" is what the environment started
    load: float

    @property
    def env_cpu_ms_per_group(self) -> float:
        return sum(ms for role, ms in self.cpu_ms_per_group.items() if role.split("/")[0] == ENV_ROLE)


def side_env_dir() -> Path:
    return ROOT / os.environ.get("SIDE_ENVS_DIR", ".venvs")


def skip_reason(framework: Framework, listed: set[str]) -> str | None:
    """Why ``framework`` cannot run here, or None."""
    if framework.side_env is not None:
        python = side_env_dir() / framework.side_env / "bin" / "python"
        if not python.is_file():
            return f"its side environment {python} is not built (sh scripts/side_env.sh {framework.side_env})"
    if framework.environment not in listed:
        return f"no environment {framework.environment!r} is listed on the search path"
    return None


def environment_variables(framework: Framework) -> dict[str, str]:
    if framework.side_env is None or framework.python_var is None:
        return {}
    return {framework.python_var: str(side_env_dir() / framework.side_env / "bin" / "python")}


def groups_between(env_metrics: Path, started: float, ended: float) -> int:
    """Groups the environment made between two wall times: its metric rows' counters written in that window."""
    groups = 0.0
    for line in env_metrics.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written right now
        if started < row["time"] <= ended:
            groups += sum(row["values"].get(counter, 0.0) for counter in GROUP_COUNTERS)
    return round(groups)


def per_role(before: dict[str, float], after: dict[str, float], groups: int) -> dict[str, float]:
    roles: dict[str, float] = {}
    for label in after.keys() & before.keys():
        role = label.split("/")[0] + ("/children" if "/" in label else "")
        roles[role] = roles.get(role, 0.0) + 1000 * (after[label] - before[label]) / groups
    return {role: round(ms, 2) for role, ms in sorted(roles.items())}


def measure(framework: Framework, round_: int, first: int, last: int) -> Measured:
    from hermes_nb.api import rl_edit_config, rl_select_environment, rl_start_training, rl_stop_training

    asyncio.run(rl_select_environment(framework.environment))
    asyncio.run(rl_edit_config({**RUN_SETTINGS, **framework.settings}))
    start = asyncio.run(rl_start_training(total_steps=last + 10))
    run_dir = Path(start.run_dir)
    try:
        wait_for_step(start.run_id, first)
        processes = run_processes(run_dir)
        before, started = cpu_seconds(processes, reaped_children=True), time.time()
        wait_for_step(start.run_id, last)
        after, ended = cpu_seconds(processes, reaped_children=True), time.time()
    finally:
        asyncio.run(rl_stop_training(start.run_id))
    groups = groups_between(run_dir / "env_metrics.jsonl", started, ended)
    if groups == 0:
        raise SystemExit(f"{framework.name}: no group was made between steps {first} and {last} ({run_dir})")
    return Measured(
        framework=framework.name,
        round=round_,
        steps=last - first,
        groups=groups,
        wall_s_per_step=round((ended - started) / (last - first), 3),
        cpu_ms_per_group=per_role(before, after, groups),
        load=round(os.getloadavg()[0], 1),
    )


def one_run(framework: Framework, round_: int, first: int, last: int) -> Measured:
    """``measure`` in a fresh home, with the row's side environment named."""
    saved = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="bench-env-overhead-") as home:
        os.environ.update(HERMES_NB_HOME=home, WANDB_MODE="disabled", **environment_variables(framework))
        try:
            return measure(framework, round_, first, last)
        finally:
            os.environ.clear()
            os.environ.update(saved)


def summary(results: list[Measured], names: list[str]) -> list[dict[str, Any]]:
    """Per framework: medians over rounds, and the median of its per-round ratios to native's CPU per group."""
    native = {r.round: r.env_cpu_ms_per_group for r in results if r.framework == "native"}
    rows = []
    for name in names:
        mine = [r for r in results if r.framework == name]
        ratios = [r.env_cpu_ms_per_group / native[r.round] for r in mine if native.get(r.round)]
        rows.append(
            {
                "framework": name,
                "runs": len(mine),
                "env_cpu_ms_per_group": round(statistics.median(r.env_cpu_ms_per_group for r in mine), 2),
                "wall_s_per_step": round(statistics.median(r.wall_s_per_step for r in mine), 3),
                "cpu_ratio_to_native": round(statistics.median(ratios), 2) if ratios else None,
                "per_round_ratios": [round(x, 2) for x in ratios],
            }
        )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'framework':<14} {'runs':>4} {'env CPU ms/group':>17} {'x native':>9} {'s/step':>8}  per round"]
    for row in rows:
        ratio = f"{row['cpu_ratio_to_native']:.2f}" if row["cpu_ratio_to_native"] is not None else "-"
        rounds = ", ".join(f"{x:.2f}" for x in row["per_round_ratios"])
        lines.append(
            f"{row['framework']:<14} {row['runs']:>4} {row['env_cpu_ms_per_group']:>17.2f} {ratio:>9} "
            f"{row['wall_s_per_step']:>8.3f}  {rounds}"
        )
    return "\n".join(lines)


def runnable(only: list[str] | None) -> list[Framework]:
    from hermes_nb.api import rl_list_environments
    from hermes_nb.system.home import ENV_PATH_VAR

    extra = os.environ.get(ENV_PATH_VAR, "")
    os.environ[ENV_PATH_VAR] = os.pathsep.join(p for p in (str(BENCH_ENVIRONMENTS), extra) if p)
    listed = {env.name for env in asyncio.run(rl_list_environments()).environments}
    chosen = []
    for framework in FRAMEWORKS:
        if only and framework.name not in only:
            continue
        reason = skip_reason(framework, listed)
        if reason is not None:
            print(f"{framework.name}: skipped: {reason}", flush=True)
            continue
        chosen.append(framework)
    if not chosen or chosen[0].name != "native":
        raise SystemExit("the native row is the reference every ratio is taken against: it must run")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2, help="rounds over the frameworks")
    parser.add_argument("--first", type=int, default=10, help="the trainer step the measurement starts at")
    parser.add_argument("--last", type=int, default=60, help="the step it ends at")
    parser.add_argument("--only", nargs="+", choices=[f.name for f in FRAMEWORKS], help="these rows (and native)")
    parser.add_argument("--output", type=Path, help="write the runs and the summary here as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-env-overhead-") as home:
        os.environ["HERMES_NB_HOME"] = home  # the listing's own home
        frameworks = runnable(sorted({"native", *args.only}) if args.only else None)
    load_before = os.getloadavg()
    print(f"load before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}", flush=True)
    results = []
    for round_ in range(args.repeats):
        for framework in frameworks:
            measured = one_run(framework, round_, args.first, args.last)
            print(json.dumps(measured.__dict__), flush=True)
            results.append(measured)
    load_after = os.getloadavg()
    rows = summary(results, [f.name for f in frameworks])
    print(table(rows))
    print(f"load after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}", flush=True)
    if args.output:
        report = {
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "command": " ".join(["bench/env_overhead.py", *sys.argv[1:]]),
            "load_before": load_before,
            "load_after": load_after,
            "runs": [r.__dict__ for r in results],
            "summary": rows,
        }
        args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
