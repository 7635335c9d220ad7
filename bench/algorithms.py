"""The RL algorithms people compare, on the quickstart: held-out lift, time to +30 points and final KL per variant.

Runs the quickstart (``configs/quickstart.yaml``: the embedded base model on ``arithmetic``, 2-digit addition)
through the public API (``rl_start_training``) once per variant and seed, with the same budget in trainer steps
(``--steps``) and evaluations every ``--eval-every`` steps (the step-0 evaluation gives each seed's start
accuracy; the environment seed also picks the held-out items). The variants are the quickstart plus the
``trainer.*`` fields of each (TRL's names, hermes_nb/config.py):

- ``default``: the quickstart as it is (``loss: ppo``, group-normalised advantages, token mean, constant rate);
- ``dr_grpo``: Dr. GRPO, ``loss_type: dr_grpo, scale_rewards: none`` (no length or std normalisation);
- ``dapo``: DAPO, ``loss: ppo, epsilon_high: 0.28, dynamic_sampling: true, loss_type: dapo``;
- ``gspo``: GSPO, ``loss: ppo, importance_sampling_level: sequence, loss_type: grpo``;
- ``kl``: a KL penalty to the base model, ``beta: 0.04``;
- ``cosine``: a cosine schedule, ``lr_scheduler_type: cosine, warmup_steps: 5``.

Clock: as bench/learning.py, t = 0 is the first trainer step (start-up is not charged) and evaluations pause
training and are charged. Each run gets its own temporary ``HERMES_NB_HOME``. Writes ``DIR/algorithms.md`` (the
table: median best held-out lift in points with the seeds' range, median seconds to +30 points among the seeds
that got there, final ``train/kl``), ``DIR/algorithms.png`` (held-out accuracy against step, the median over
seeds, one colour per variant) and ``DIR/runs.json`` (every seed's evaluations); ``--write`` also puts the table
and the plot in docs/benchmarks.md and docs/img/.

    .venv/bin/python bench/algorithms.py [--out out/algorithms] [--seeds 0 1 2] [--steps 400] [--eval-every 25]
                                         [--variants default dr_grpo dapo gspo kl cosine] [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from learning import POLL_SECONDS, ROOT, read_rows

QUICKSTART = ROOT / "configs" / "quickstart.yaml"
ENVIRONMENT = "arithmetic"
# Issue 3's target for the quickstart: +30 points of held-out accuracy.
TARGET_LIFT = 0.30
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "dr_grpo": {"trainer.loss_type": "dr_grpo", "trainer.scale_rewards": "none"},
    "dapo": {
        "trainer.loss": "ppo",
        "trainer.epsilon_high": 0.28,
        "trainer.dynamic_sampling": True,
        "trainer.loss_type": "dapo",
    },
    "gspo": {"trainer.loss": "ppo", "trainer.importance_sampling_level": "sequence", "trainer.loss_type": "grpo"},
    "kl": {"trainer.beta": 0.04},
    "cosine": {"trainer.lr_scheduler_type": "cosine", "trainer.warmup_steps": 5},
}
# A run that has not ended this long after its start is stopped and reported as far as it got (a stalled run
# must not hold the whole comparison): ~10x the quickstart's 0.12 s/step plus start-up, at 400 steps.
DEFAULT_MAX_RUN_SECONDS = 900.0
HEADING = "## Algorithms"
INTRO = (
    "`bench/algorithms.py`: the quickstart (`configs/quickstart.yaml`, 2-digit addition on the embedded base model)\n"
    "with the default and each major variant (Dr. GRPO, DAPO clip-higher + dynamic sampling, GSPO, a KL penalty\n"
    "`beta: 0.04`, a cosine schedule), the same number of steps and seeds each. Time 0 is the first trainer step;\n"
    "evaluations (greedy, held-out) are charged to the clock.\n"
)
EVAL_KEY = "eval/percent_correct"
KL_KEY = "train/kl"


@dataclass
class SeedRun:
    variant: str
    seed: int
    start_accuracy: float
    evals: list[tuple[int, float, float]] = field(default_factory=list)  # (step, seconds since t0, accuracy)
    final_kl: float | None = None
    status: str = ""

    def best_lift(self) -> float:
        return max((acc for _, _, acc in self.evals), default=self.start_accuracy) - self.start_accuracy

    def seconds_to(self, lift: float) -> float | None:
        return next((sec for _, sec, acc in self.evals if acc - self.start_accuracy >= lift - 1e-9), None)


def one_run(variant: str, seed: int, steps: int, eval_every: int, max_seconds: float) -> SeedRun:
    from hermes_nb.api import rl_load_config, rl_select_environment, rl_start_training
    from hermes_nb.system.home import run_paths

    asyncio.run(rl_select_environment(ENVIRONMENT))
    asyncio.run(rl_load_config(QUICKSTART))
    overrides = {"total_steps": steps, "env.steps_per_eval": eval_every, "trainer.seed": seed, "env.seed": seed}
    started = asyncio.run(rl_start_training(**overrides, **VARIANTS[variant]))
    status = wait_for_end(started.run_id, max_seconds)
    if status.status == "failed":
        raise RuntimeError(f"{variant} seed {seed}: run {started.run_id} failed: {status.error}")
    return collect(variant, seed, run_paths(started.run_id), status.status)


def wait_for_end(run_id: str, max_seconds: float) -> Any:
    """The run's status once it has ended, or once ``max_seconds`` have passed (then it is stopped first)."""
    from hermes_nb.api import rl_check_status, rl_stop_training

    deadline = time.monotonic() + max_seconds
    try:
        while not (status := asyncio.run(rl_check_status(run_id))).is_terminal and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
    finally:
        if not asyncio.run(rl_check_status(run_id)).is_terminal:
            asyncio.run(rl_stop_training(run_id))
            status = asyncio.run(rl_check_status(run_id))
    return status


def collect(variant: str, seed: int, paths: Any, status: str) -> SeedRun:
    steps = read_rows(paths.metrics)
    if not steps:
        raise RuntimeError(f"{variant} seed {seed}: the run ended without a trainer step")
    t0 = steps[0]["time"]
    evals = [row for row in read_rows(paths.env_metrics) if EVAL_KEY in row["values"]]
    start = next(row for row in evals if row["step"] == 0)["values"][EVAL_KEY]
    kls = [row["values"][KL_KEY] for row in steps if KL_KEY in row["values"]]
    return SeedRun(
        variant=variant,
        seed=seed,
        start_accuracy=start,
        evals=[(row["step"], row["time"] - t0, row["values"][EVAL_KEY]) for row in evals if row["step"] > 0],
        final_kl=kls[-1] if kls else None,
        status=status,
    )


def median_curve(runs: list[SeedRun]) -> tuple[list[int], list[float]]:
    """Held-out accuracy at each evaluated step, the median over the seeds that evaluated it (step 0 included)."""
    by_step: dict[int, list[float]] = {}
    for run in runs:
        for step, acc in [(0, run.start_accuracy), *((s, a) for s, _, a in run.evals)]:
            by_step.setdefault(step, []).append(acc)
    steps = sorted(by_step)
    return steps, [statistics.median(by_step[step]) for step in steps]


def table_row(variant: str, runs: list[SeedRun]) -> str:
    lifts = [100 * run.best_lift() for run in runs]
    reached = [sec for run in runs if (sec := run.seconds_to(TARGET_LIFT)) is not None]
    kls = [run.final_kl for run in runs if run.final_kl is not None]
    to_target = (
        f"{statistics.median(reached):.0f} s ({len(reached)}/{len(runs)})" if reached else f"never (0/{len(runs)})"
    )
    kl = f"{statistics.median(kls):.4g}" if kls else "not logged"
    return (
        f"| {variant} | {statistics.median(lifts):+.1f} ({min(lifts):+.1f} to {max(lifts):+.1f}) | {to_target} | {kl} |"
    )


def table(results: dict[str, list[SeedRun]]) -> list[str]:
    return [
        f"| variant | best held-out lift, points: median (range) | to +{TARGET_LIFT * 100:.0f} points: median "
        "(seeds) | final KL |",
        "|---|---|---|---|",
        *(table_row(variant, runs) for variant, runs in results.items()),
    ]


def save_plot(results: dict[str, list[SeedRun]], path: Path) -> Path:
    """Held-out accuracy against step, one colour per variant: the median over seeds. No pyplot (no global state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8.0, 4.8), dpi=100)
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    for index, (variant, runs) in enumerate(results.items()):
        steps, accuracy = median_curve(runs)
        ax.plot(steps, [100 * a for a in accuracy], color=f"C{index % 10}", marker="o", markersize=3, label=variant)
    ax.set_xlabel("step")
    ax.set_ylabel("held-out accuracy, % (median over seeds)")
    ax.set_title("Quickstart (arithmetic): algorithm variants")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    return path


def write_outputs(out: Path, header: str, results: dict[str, list[SeedRun]]) -> tuple[list[str], Path]:
    out.mkdir(parents=True, exist_ok=True)
    lines = [header, "", *table(results)]
    (out / "algorithms.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    runs = [asdict(run) for variant_runs in results.values() for run in variant_runs]
    (out / "runs.json").write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")
    return lines, save_plot(results, out / "algorithms.png")


def write_docs(lines: list[str], plot: Path) -> None:
    """The table and the plot into docs/benchmarks.md (its own section, a dated entry) and docs/img/."""
    from report import append_run

    image = ROOT / "docs" / "img" / "algorithms.png"
    shutil.copyfile(plot, image)
    command = ".venv/bin/python bench/algorithms.py " + " ".join(sys.argv[1:])
    block = f"\n{time.strftime('%Y-%m-%d %H:%M')}, `{command}`:\n\n" + "\n".join(lines)
    append_run(HEADING, INTRO, block + f"\n\n![held-out accuracy per variant](img/{image.name})\n")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "algorithms", help="where the table and plot go")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=400, help="trainer steps per run (the same for every variant)")
    parser.add_argument("--eval-every", type=int, default=None, help="steps between evaluations (default steps/16)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS), metavar="VARIANT")
    parser.add_argument("--max-run-seconds", type=float, default=DEFAULT_MAX_RUN_SECONDS)
    parser.add_argument("--write", action="store_true", help="also add the table and plot to docs/benchmarks.md")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    # 16 evaluations per run: enough points for a curve and a time to +30, at ~3% of the quickstart's time.
    args.eval_every = args.eval_every or max(1, args.steps // 16)
    return args


def main() -> None:
    args = parse_args()
    header = (
        f"{len(args.seeds)} seeds ({', '.join(map(str, args.seeds))}), {args.steps} steps, evaluation every "
        f"{args.eval_every} steps; load average {os.getloadavg()[0]:.1f} at the start"
    )
    print(header, flush=True)
    results: dict[str, list[SeedRun]] = {variant: [] for variant in args.variants}
    # Seed-major: the variants alternate, so a change of load over the bench falls on all of them alike.
    for seed in args.seeds:
        for variant in args.variants:
            with tempfile.TemporaryDirectory() as tmp:
                os.environ["HERMES_NB_HOME"] = tmp
                os.environ.setdefault("WANDB_MODE", "offline")
                run = one_run(variant, seed, args.steps, args.eval_every, args.max_run_seconds)
            results[variant].append(run)
            print(
                f"{variant} seed {seed} ({run.status}): start {100 * run.start_accuracy:.1f}%, best lift "
                f"{100 * run.best_lift():+.1f} points, final KL {run.final_kl}",
                flush=True,
            )
    header += f", {os.getloadavg()[0]:.1f} at the end"
    lines, plot = write_outputs(args.out, header, results)
    print("\n".join(lines[2:]))
    print(f"wrote {args.out / 'algorithms.md'}, {plot}")
    if args.write:
        write_docs(lines, plot)


if __name__ == "__main__":
    main()
