"""Does task A's training help task B? Steps (and seconds) for B to reach a fixed held-out accuracy from A's
weights vs. from the base model, and how much of A survives training on B with and without replay.

Per seed (``trainer.seed`` and the environment's ``seed`` both set to it; the environment seed also picks the
held-out items), in its own temporary ``HERMES_NB_HOME``, through the public API (``rl_start_training``) with the
quickstart config (``configs/quickstart.yaml``, read when the bench starts) as the base:

1. **A**: ``arithmetic`` with ``operation: add`` for ``--a-steps`` steps, to completion.
2. Three **B** runs (``operation: --b-operation``), started together so that they share the machine's load and
   their seconds compare: *from base* (the embedded model), *from A* (``trainer.pretrained_model_path`` = the A
   run: its final checkpoint, weights only, fresh optimizer) and *from A + replay* (the same, plus
   ``trainer.transfer_learning`` with ``replay_from`` = the A run, ``transfer_weight``, ``fine_tune_steps`` = B's
   steps). Each trains ``--b-steps`` steps.

Which pair transfers: A's final checkpoint and the base model are also evaluated (greedy, held-out) on every
operation, i.e. what A's training carries to each candidate B before B trains at all.

The bar is fixed before B trains, by a rule rather than by looking at curves: the base model's greedy held-out
accuracy on B (measured here, in process) plus ``--lift`` (15 points, the lift ``bench/vs_trl.py`` uses), unless
``--target`` gives an absolute accuracy. The crossing step of an arm is the first evaluation
(``eval/percent_correct`` in ``env_metrics.jsonl``, greedy on ``eval_items`` held-out items, every
``steps_per_eval`` steps; step 0 is the evaluation before the first step) at or above the bar. Seconds run from
the arm's first trainer step (``metrics.jsonl``) to that evaluation's wall time; evaluation pauses are charged.
Steps are the primary figure: other jobs share the CPU, so seconds are only reported as the from-A / from-base
ratio, both measured concurrently.

Retention: each run's final checkpoint is evaluated on task A here, in this process, with the environment's own
held-out items and checker and greedy decoding: the same measurement as the runs' ``eval/percent_correct``, on
the A items of the same seed. (``rl_test_inference`` would measure something else: it samples training items at
the environment's temperature, a few groups per model.) The A run's own last evaluation is printed next to this
evaluation of its final checkpoint as a check that the two agree.

    .venv/bin/python bench/transfer.py [--quick] [--seeds 0 1 2] [--a-steps 300] [--b-steps 400] [--lift 0.15]
                                       [--b-operation mixed] [--set NAME=VALUE ...] [--write]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from learning import parse_overrides  # bench/ is on the path when a bench runs as a script

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
ENVIRONMENT = "arithmetic"
ARITHMETIC_FILE = ROOT / "environments" / "arithmetic.py"
A_OPERATION = "add"
TARGET_STEP_RATIO = 0.5  # issue 6: from A needs at most half the steps the base model needs
POLL_SECONDS = 1.0

P = TypeVar("P")  # a bench's plan
T = TypeVar("T")  # what one seed of it gives
# One torch thread per trainer: the three B runs share two cores with other jobs; more threads would only thrash.
TORCH_THREADS = 1
SECTION = "## Transfer learning"

ARMS = ("from base", "from A", "from A + replay")
OPERATIONS = ("add", "sub", "mixed")
# Besides the target, the crossing steps at a few bars below it (3 points apart: about one binomial standard
# error of a 200-item evaluation near 30%), since a single bar near one arm's start decides the ratio alone.
THRESHOLDS = 3
THRESHOLD_STEP = 0.03


@dataclass
class Plan:
    seeds: list[int]
    a_steps: int
    b_steps: int
    lift: float
    target: float | None  # an absolute bar instead of the base model's accuracy on B + lift
    b_operation: str
    steps_per_eval: int
    eval_items: int
    transfer_weight: float
    overrides: dict[str, Any]


@dataclass
class Arm:
    name: str
    run_id: str
    status: str = ""
    evals: list[tuple[int, float, float]] = field(default_factory=list)  # (step, seconds since first step, acc)
    seconds_per_step: float = 0.0
    checkpoint: str | None = None
    a_accuracy: float | None = None  # greedy held-out accuracy of the final checkpoint on task A

    def crossing(self, target: float) -> tuple[int, float] | None:
        return next(((step, sec) for step, sec, acc in self.evals if acc >= target - 1e-9), None)


@dataclass
class SeedOutcome:
    seed: int
    a: Arm
    arms: dict[str, Arm]
    # Per operation: greedy held-out accuracy of (the base model, A's final checkpoint): what A carries to each B.
    zero_step: dict[str, tuple[float, float | None]]
    load: float
    target: float  # the bar on B, fixed before B trained


# ---------------------------------------------------------------- runs


def run_overrides(plan: Plan, seed: int, operation: str, steps: int) -> dict[str, Any]:
    return {
        "trainer.seed": seed,
        "env.seed": seed,
        "env.operation": operation,
        "env.total_steps": steps,
        "env.steps_per_eval": plan.steps_per_eval,
        "env.eval_items": plan.eval_items,
        # The runs' final checkpoints are all this bench needs; interval checkpoints only cost time.
        "trainer.save_checkpoint_interval": steps,
        "trainer.torch_threads": TORCH_THREADS,
        "wandb.mode": "disabled",  # W&B is not what is measured, and its service process costs CPU
        **plan.overrides,
    }


def arm_overrides(plan: Plan, name: str, a_run: str) -> dict[str, Any]:
    if name == "from base":
        return {}
    transfer: dict[str, Any] = {"trainer.pretrained_model_path": a_run}
    if name == "from A + replay":
        transfer |= {
            "trainer.transfer_learning": True,
            "trainer.replay_from": a_run,
            "trainer.transfer_weight": plan.transfer_weight,
            "trainer.fine_tune_steps": plan.b_steps,
        }
    return transfer


def start(name: str, overrides: dict[str, Any]) -> Arm:
    from hermes_nb import run_sync
    from hermes_nb.api import rl_start_training

    started = run_sync(rl_start_training(**overrides))
    print(f"  started {name}: {started.run_id}", flush=True)
    return Arm(name=name, run_id=started.run_id)


def wait_all(arms: list[Arm]) -> None:
    """Until every run has ended; a failed run stops the bench with its error and log tail."""
    from hermes_nb import run_sync
    from hermes_nb.api import rl_check_status

    pending = list(arms)
    while pending:
        time.sleep(POLL_SECONDS)
        for arm in list(pending):
            status = run_sync(rl_check_status(arm.run_id))
            if not status.is_terminal:
                continue
            if status.status == "failed":
                raise RuntimeError(f"{arm.name} run {arm.run_id} failed: {status.error}\n" + "\n".join(status.log_tail))
            arm.status = status.status
            pending.remove(arm)
            print(f"  {arm.name} {status.status} at step {status.step}", flush=True)


def stop_all(arms: list[Arm]) -> None:
    from hermes_nb import run_sync
    from hermes_nb.api import rl_stop_training

    for arm in arms:
        run_sync(rl_stop_training(arm.run_id))  # idempotent: a finished run is left as it is


def collect(arm: Arm) -> None:
    from hermes_nb.metrics.reader import read_all_metrics
    from hermes_nb.protocol.checkpoints import read_checkpoints
    from hermes_nb.protocol.metrics import EVAL_PERCENT_CORRECT
    from hermes_nb.runs.run_dirs import resolve_run

    paths = resolve_run(arm.run_id)
    steps = read_all_metrics(paths.metrics)
    if not steps:
        raise RuntimeError(f"{arm.name} run {arm.run_id} wrote no trainer step")
    t0 = steps[0].time
    evals = [r for r in read_all_metrics(paths.env_metrics) if EVAL_PERCENT_CORRECT in r.values]
    arm.evals = [(r.step, max(0.0, r.time - t0) if r.step else 0.0, r.values[EVAL_PERCENT_CORRECT]) for r in evals]
    step_seconds = [r.values["train/step_seconds"] for r in steps[1:] if "train/step_seconds" in r.values]
    arm.seconds_per_step = statistics.median(step_seconds) if step_seconds else 0.0
    checkpoints = read_checkpoints(paths.checkpoints_index)
    arm.checkpoint = checkpoints[-1].path if checkpoints else None


def in_fresh_home(bench: str, bench_seed: Callable[[P, int], T], plan: P, seed: int) -> T:
    """One seed of a bench in a home of its own, so no run, checkpoint or warm kit of another seed is seen."""
    with tempfile.TemporaryDirectory(prefix=f"hermes-nb-{bench}-") as tmp:
        os.environ["HERMES_NB_HOME"] = tmp
        os.environ.setdefault("WANDB_MODE", "offline")
        return bench_seed(plan, seed)


def run_together(named: dict[str, dict[str, Any]]) -> dict[str, Arm]:
    """Start one run per name with its overrides, all at once; wait for every one to end, stop what is left on
    the way out, and read each one's figures."""
    arms: list[Arm] = []
    try:
        for name, overrides in named.items():
            arms.append(start(name, overrides))
        wait_all(arms)
    finally:
        stop_all(arms)
    for arm in arms:
        collect(arm)
    return {arm.name: arm for arm in arms}


def train_a(plan: Plan, seed: int) -> Arm:
    return run_together({"A": run_overrides(plan, seed, A_OPERATION, plan.a_steps)})["A"]


def train_b(plan: Plan, seed: int, a: Arm) -> dict[str, Arm]:
    base = run_overrides(plan, seed, plan.b_operation, plan.b_steps)
    return run_together({name: {**base, **arm_overrides(plan, name, a.run_id)} for name in ARMS})


def bench_seed(plan: Plan, seed: int) -> SeedOutcome:
    from hermes_nb import run_sync
    from hermes_nb.api import rl_load_config, rl_select_environment
    from hermes_nb.system.home import embedded_base_model_dir

    run_sync(rl_select_environment(ENVIRONMENT))
    run_sync(rl_load_config(QUICKSTART))
    base_model = str(embedded_base_model_dir())
    target = plan.target
    if target is None:
        target = HeldOutEvaluator(plan.b_operation, seed, plan.eval_items).accuracy(base_model) + plan.lift
    print(f"seed {seed}: A = {A_OPERATION}, {plan.a_steps} steps", flush=True)
    a = train_a(plan, seed)
    print(
        f"seed {seed}: B = {plan.b_operation}, {plan.b_steps} steps, three runs together; bar {pct(target)}", flush=True
    )
    arms = train_b(plan, seed, a)
    load = os.getloadavg()[0]
    evaluator = HeldOutEvaluator(A_OPERATION, seed, plan.eval_items)
    for arm in [a, *arms.values()]:
        arm.a_accuracy = evaluator.accuracy(arm.checkpoint) if arm.checkpoint else None
    zero_step = {
        op: (ev.accuracy(base_model), ev.accuracy(a.checkpoint) if a.checkpoint else None)
        for op in OPERATIONS
        for ev in [evaluator if op == A_OPERATION else HeldOutEvaluator(op, seed, plan.eval_items)]
    }
    return SeedOutcome(seed=seed, a=a, arms=arms, zero_step=zero_step, load=load, target=target)


# ---------------------------------------------------------------- task-A evaluation in this process


def load_arithmetic() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_arithmetic", ARITHMETIC_FILE)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {ARITHMETIC_FILE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the config's annotations through the module
    spec.loader.exec_module(module)
    return module


class HeldOutEvaluator:
    """Greedy held-out accuracy on one arithmetic operation, exactly as the environment evaluates it (its items,
    its checker, its completion length, its stop)."""

    def __init__(self, operation: str, seed: int, eval_items: int) -> None:
        module = load_arithmetic()
        env = module.ArithmeticEnv(module.ArithmeticConfig(operation=operation, seed=seed, eval_items=eval_items))
        self.items = env.eval_items()
        self.max_tokens = env.max_completion_tokens()
        self.score = env.score_completion
        self.is_correct = env.is_correct
        self.stop = env.stop

    def accuracy(self, model_dir: str) -> float:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        torch.set_num_threads(1)
        hf_logging.disable_progress_bar()  # one bar per checkpoint would bury the table
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        encoded = tokenizer([item.prompt for item in self.items], return_tensors="pt", padding=True)
        with torch.no_grad():
            output = model.generate(
                **encoded,
                max_new_tokens=self.max_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        texts = tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
        pairs = zip(texts, self.items, strict=True)
        correct = [self.is_correct(self.score(self.cut(text), item.answer)) for text, item in pairs]
        return sum(correct) / len(correct)

    def cut(self, text: str) -> str:
        for stop in self.stop:
            text = text.split(stop)[0]
        return text


# ---------------------------------------------------------------- report


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"


def crossing_text(arm: Arm, target: float, cap: int) -> str:
    crossed = arm.crossing(target)
    return f"step {crossed[0]} ({crossed[1]:.0f} s)" if crossed else f"not in {cap}"


def seed_lines(plan: Plan, outcome: SeedOutcome) -> list[str]:
    a = outcome.a
    a_last = a.evals[-1] if a.evals else (0, 0.0, 0.0)
    lines = [
        f"seed {outcome.seed} (load avg {outcome.load:.1f}): A {A_OPERATION} {pct(a.evals[0][2])} -> "
        f"{pct(a_last[2])} at step {a_last[0]} ({a.seconds_per_step:.2f} s/step); its final checkpoint here: "
        f"{pct(a.a_accuracy)}",
        "  base model -> A's final checkpoint, greedy held-out: "
        + ", ".join(f"{op} {pct(base)} -> {pct(after)}" for op, (base, after) in outcome.zero_step.items()),
        f"  {'arm':<16} {'B start':>8} {'B end':>7} {'reaches ' + pct(outcome.target):>18} "
        f"{'s/step':>7} {'A after B':>9}",
    ]
    for arm in outcome.arms.values():
        lines.append(
            f"  {arm.name:<16} {pct(arm.evals[0][2]):>8} {pct(arm.evals[-1][2]):>7} "
            f"{crossing_text(arm, outcome.target, plan.b_steps):>18} {arm.seconds_per_step:>7.2f} "
            f"{pct(arm.a_accuracy):>9}"
        )
        lines.append("    curve: " + " ".join(f"{step}:{acc * 100:.0f}" for step, _, acc in arm.evals))
    lines.append(f"  first step at or above ({' / '.join(outcome.arms)}): " + thresholds_text(outcome))
    return lines


def thresholds_text(outcome: SeedOutcome) -> str:
    """Crossing steps at the target and below it: how the comparison depends on where the bar is set."""
    bars = sorted({round(outcome.target - k * THRESHOLD_STEP, 3) for k in range(THRESHOLDS)})
    parts = []
    for bar in bars:
        steps = [arm.crossing(bar) for arm in outcome.arms.values()]
        parts.append(f"{pct(bar)} " + "/".join("–" if s is None else str(s[0]) for s in steps))
    return ", ".join(parts)


def step_ratio(outcome: SeedOutcome, target: float, cap: int) -> tuple[float | None, float | None]:
    """(from-A steps / from-base steps, same for seconds); a base arm that never crossed counts as ``cap``."""
    base = outcome.arms["from base"].crossing(target)
    from_a = outcome.arms["from A"].crossing(target)
    if from_a is None:
        return None, None
    base_steps, base_seconds = base if base else (cap, None)
    steps = from_a[0] / base_steps if base_steps else None
    seconds = from_a[1] / base_seconds if base_seconds else None
    return steps, seconds


def summary_lines(plan: Plan, outcomes: list[SeedOutcome]) -> list[str]:
    lines = []
    met = 0
    for outcome in outcomes:
        steps, seconds = step_ratio(outcome, outcome.target, plan.b_steps)
        base_crossed = outcome.arms["from base"].crossing(outcome.target) is not None
        ok = steps is not None and steps <= TARGET_STEP_RATIO + 1e-9
        met += ok
        lines.append(
            f"seed {outcome.seed}: steps from A / from base = "
            + ("–" if steps is None else f"{steps:.2f}" + ("" if base_crossed else f" (base not in {plan.b_steps})"))
            + f"; seconds ratio {'–' if seconds is None else f'{seconds:.2f}'}; "
            + ("target met" if ok else "target NOT met")
        )
    retained = {name: known([o.arms[name].a_accuracy for o in outcomes]) for name in ARMS}
    a_final = known([o.a.a_accuracy for o in outcomes])
    lines.append(
        "A's final checkpoint vs the base model, greedy held-out, mean over seeds: "
        + ", ".join(
            f"{op} {pct(mean([o.zero_step[op][0] for o in outcomes]))} -> "
            f"{pct(mean(known([o.zero_step[op][1] for o in outcomes])))}"
            for op in OPERATIONS
        )
    )
    lines.append(
        f"target (from A <= {TARGET_STEP_RATIO:.0%} of the steps to the bar): met for {met}/{len(outcomes)} "
        f"seeds. Task A held-out accuracy, mean over seeds: after A {pct(mean(a_final))}; after B "
        + ", ".join(f"{name} {pct(mean(values))}" for name, values in retained.items())
    )
    return lines


def known(values: list[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def write_docs(lines: list[str], command: str) -> None:
    """Replace this bench's section of docs/benchmarks.md (other benches own the other sections)."""
    from report import replace_section, run_block

    replace_section(SECTION, SECTION_INTRO, run_block(f"`{command}`", lines))


SECTION_INTRO = (
    "`bench/transfer.py`: task A = `arithmetic` 2-digit addition, task B = another operation of the same\n"
    "environment, on the embedded base model with the quickstart config. Per seed: one A run, then three B runs\n"
    "started together (from the base model, from A's final weights, from A's weights with 25% of each batch\n"
    "replayed from A's recorded trajectories). The bar on B is set before B trains, by rule: the base model's\n"
    "greedy held-out accuracy on B + 15 points. `reaches` is the first held-out evaluation at or above it (step,\n"
    "and seconds from the run's first step; step 0 = before B's first step); `A after B` is the final checkpoint's\n"
    "greedy held-out accuracy on task A (same items and checker as the environment's evaluation). Steps are the\n"
    "figure to read: the three B runs share two cores, so seconds compare only within a seed. Target (issue 6):\n"
    "from A needs at most half the steps.\n"
)


# ---------------------------------------------------------------- main


def parse_plan(argv: list[str] | None = None) -> tuple[Plan, bool]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one seed, shorter runs (a smoke check, ~6 min)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--a-steps", type=int, default=300)
    parser.add_argument("--b-steps", type=int, default=400)
    parser.add_argument("--lift", type=float, default=0.15, help="bar = base model's accuracy on B + this")
    parser.add_argument("--target", type=float, default=None, help="an absolute bar on B instead")
    parser.add_argument("--b-operation", choices=("sub", "mixed"), default="mixed")
    parser.add_argument("--steps-per-eval", type=int, default=10)
    parser.add_argument("--eval-items", type=int, default=200)
    parser.add_argument("--transfer-weight", type=float, default=0.25)
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="NAME=VALUE override")
    parser.add_argument("--write", action="store_true", help="write the numbers into docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.a_steps, args.b_steps = args.seeds[:1], 80, 40
    plan = Plan(
        seeds=args.seeds,
        a_steps=args.a_steps,
        b_steps=args.b_steps,
        lift=args.lift,
        target=args.target,
        b_operation=args.b_operation,
        steps_per_eval=args.steps_per_eval,
        eval_items=args.eval_items,
        transfer_weight=args.transfer_weight,
        overrides=parse_overrides(args.overrides),
    )
    return plan, args.write


def main() -> None:
    plan, write = parse_plan()
    began = time.time()
    header = (
        f"config {QUICKSTART.relative_to(ROOT)}: A = {A_OPERATION} {plan.a_steps} steps, B = {plan.b_operation} "
        f"{plan.b_steps} steps, bar "
        + (pct(plan.target) if plan.target is not None else f"base model on B + {plan.lift * 100:g} points")
        + f", eval every {plan.steps_per_eval} steps on "
        f"{plan.eval_items} items, replay weight {plan.transfer_weight}"
        + (f", overrides {plan.overrides}" if plan.overrides else "")
    )
    print(header, flush=True)
    lines = [header]
    outcomes = []
    for seed in plan.seeds:
        outcome = in_fresh_home("transfer", bench_seed, plan, seed)
        outcomes.append(outcome)
        for line in seed_lines(plan, outcome):
            print(line, flush=True)
            lines.append(line)
    for line in summary_lines(plan, outcomes):
        print(line, flush=True)
        lines.append(line)
    lines.append(f"bench wall time {(time.time() - began) / 60:.1f} min")
    print(lines[-1])
    if write:
        write_docs(lines, ".venv/bin/python bench/transfer.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
