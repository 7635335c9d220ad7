"""Does on-policy distillation carry a trained skill to a student faster than RL does? Held-out accuracy against
steps for a student distilled from a trained teacher, for RL from the base model with the same budget, and for
starting from the teacher's weights (issue 41).

Per seed (``trainer.seed`` and the environment's ``seed`` both set to it), in its own temporary ``HERMES_NB_HOME``,
through the public API with the quickstart config (``configs/quickstart.yaml``, 2-digit addition on the embedded
base model) as the base:

1. **Teacher**: ``--teacher-steps`` steps of RL (the quickstart), to completion.
2. Three **student** runs of ``--student-steps`` steps each, started together so they share the machine's load:
   *distilled* (from the base model, ``trainer.teacher_model`` = the teacher run, ``trainer.teacher_kl_coef``:
   the teacher's per-token reverse KL joins the reward's advantage), *RL from base* (the same run without the
   teacher) and *teacher's weights* (``trainer.pretrained_model_path`` = the teacher run: the head start, as the
   existing transfer does).

Each arm's curve is its ``eval/percent_correct`` (greedy, ``eval_items`` held-out items, every ``steps_per_eval``
steps; step 0 is before the first step). ``reaches`` is the first evaluation at or above the bar: the teacher's
final accuracy less ``--margin``. Steps are the figure to read: the three students share the CPU (and the
distilled one also runs its teacher's forward), so seconds compare only within a seed.

    .venv/bin/python bench/distillation.py [--quick] [--seeds 0 1 2] [--teacher-steps 300] [--student-steps 300]
                                           [--coef 1.0] [--margin 0.05] [--set NAME=VALUE ...] [--write]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from learning import parse_overrides  # bench/ is on the path when a bench runs as a script
from transfer import QUICKSTART, ROOT, Arm, in_fresh_home, pct, run_together

ENVIRONMENT = "arithmetic"
SECTION = "## On-policy distillation"
ARMS = ("distilled", "RL from base", "teacher's weights")
# One torch thread per trainer: three students (and a teacher model) share the cores with other jobs.
TORCH_THREADS = 1


@dataclass
class Plan:
    seeds: list[int]
    teacher_steps: int
    student_steps: int
    coef: float
    margin: float
    steps_per_eval: int
    eval_items: int
    overrides: dict[str, Any]


@dataclass
class SeedOutcome:
    seed: int
    teacher: Arm
    arms: dict[str, Arm]
    load: float

    @property
    def bar(self) -> float:
        """The teacher's final held-out accuracy (the margin is taken off where it is compared)."""
        return self.teacher.evals[-1][2] if self.teacher.evals else 0.0


def run_overrides(plan: Plan, seed: int, steps: int) -> dict[str, Any]:
    return {
        "trainer.seed": seed,
        "env.seed": seed,
        "env.total_steps": steps,
        "env.steps_per_eval": plan.steps_per_eval,
        "env.eval_items": plan.eval_items,
        # The final checkpoint is all the teacher needs to hand on; interval checkpoints only cost time.
        "trainer.save_checkpoint_interval": steps,
        "trainer.torch_threads": TORCH_THREADS,
        "wandb.mode": "disabled",
        **plan.overrides,
    }


def arm_overrides(plan: Plan, name: str, teacher_run: str) -> dict[str, Any]:
    if name == "distilled":
        return {"trainer.teacher_model": teacher_run, "trainer.teacher_kl_coef": plan.coef}
    if name == "teacher's weights":
        return {"trainer.pretrained_model_path": teacher_run}
    return {}


def bench_seed(plan: Plan, seed: int) -> SeedOutcome:
    from hermes_nb import run_sync
    from hermes_nb.api import rl_load_config, rl_select_environment

    run_sync(rl_select_environment(ENVIRONMENT))
    run_sync(rl_load_config(QUICKSTART))
    print(f"seed {seed}: teacher, {plan.teacher_steps} steps", flush=True)
    teacher = run_together({"teacher": run_overrides(plan, seed, plan.teacher_steps)})["teacher"]
    print(f"seed {seed}: three students, {plan.student_steps} steps, together", flush=True)
    base = run_overrides(plan, seed, plan.student_steps)
    arms = run_together({name: {**base, **arm_overrides(plan, name, teacher.run_id)} for name in ARMS})
    return SeedOutcome(seed=seed, teacher=teacher, arms=arms, load=os.getloadavg()[0])


def curve(arm: Arm) -> str:
    return " ".join(f"{step}:{acc * 100:.0f}" for step, _, acc in arm.evals)


def seed_lines(plan: Plan, outcome: SeedOutcome) -> list[str]:
    teacher, bar = outcome.teacher, outcome.bar - plan.margin
    lines = [
        f"seed {outcome.seed} (load avg {outcome.load:.1f}): teacher {pct(teacher.evals[0][2])} -> "
        f"{pct(outcome.bar)} at step {plan.teacher_steps} ({teacher.seconds_per_step:.2f} s/step); bar {pct(bar)}",
        f"  {'arm':<18} {'start':>7} {'end':>7} {'reaches bar':>14} {'s/step':>7}",
    ]
    for name, arm in outcome.arms.items():
        crossed = arm.crossing(bar)
        reaches = f"step {crossed[0]}" if crossed else f"not in {plan.student_steps}"
        first, last = (arm.evals[0][2], arm.evals[-1][2]) if arm.evals else (None, None)
        lines.append(f"  {name:<18} {pct(first):>7} {pct(last):>7} {reaches:>14} {arm.seconds_per_step:>7.2f}")
        lines.append(f"    curve: {curve(arm)}")
    return lines


def summary_lines(plan: Plan, outcomes: list[SeedOutcome]) -> list[str]:
    lines = []
    for name in ARMS:
        ends = [o.arms[name].evals[-1][2] for o in outcomes if o.arms[name].evals]
        steps = [c[0] for o in outcomes if (c := o.arms[name].crossing(o.bar - plan.margin))]
        lines.append(
            f"{name}: final held-out accuracy, mean over {len(outcomes)} seeds {pct(sum(ends) / len(ends))}; "
            f"reached the bar on {len(steps)}/{len(outcomes)} seeds"
            + (f" (steps {', '.join(map(str, steps))})" if steps else "")
        )
    return lines


SECTION_INTRO = (
    "`bench/distillation.py`: a teacher trained on the quickstart (arithmetic 2-digit addition, embedded base\n"
    "model), then three students started together: distilled from the teacher (`trainer.teacher_model`), RL from\n"
    "the base model with the same budget, and starting from the teacher's weights. `reaches bar` is the first\n"
    "greedy held-out evaluation at or above the teacher's final accuracy less the margin. Steps are the figure to\n"
    "read: the students share the CPU, so seconds compare only within a seed.\n"
)


def write_docs(lines: list[str], command: str) -> None:
    """Replace this bench's section of docs/benchmarks.md (other benches own the other sections)."""
    from report import replace_section, run_block

    replace_section(SECTION, SECTION_INTRO, run_block(f"`{command}`", lines))


def parse_plan(argv: list[str] | None = None) -> tuple[Plan, bool]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one seed, short runs (a smoke check)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--teacher-steps", type=int, default=300)
    parser.add_argument("--student-steps", type=int, default=300)
    parser.add_argument("--coef", type=float, default=1.0, help="trainer.teacher_kl_coef of the distilled arm")
    parser.add_argument("--margin", type=float, default=0.05, help="bar = teacher's final accuracy - this")
    parser.add_argument("--steps-per-eval", type=int, default=10)
    parser.add_argument("--eval-items", type=int, default=200)
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="NAME=VALUE override")
    parser.add_argument("--write", action="store_true", help="write the numbers into docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.teacher_steps, args.student_steps = args.seeds[:1], 40, 20
    plan = Plan(
        seeds=args.seeds,
        teacher_steps=args.teacher_steps,
        student_steps=args.student_steps,
        coef=args.coef,
        margin=args.margin,
        steps_per_eval=args.steps_per_eval,
        eval_items=args.eval_items,
        overrides=parse_overrides(args.overrides),
    )
    return plan, args.write


def main() -> None:
    plan, write = parse_plan()
    began = time.time()
    header = (
        f"config {QUICKSTART.relative_to(ROOT)}: teacher {plan.teacher_steps} steps, students {plan.student_steps} "
        f"steps, teacher_kl_coef {plan.coef}, eval every {plan.steps_per_eval} steps on {plan.eval_items} items"
        + (f", overrides {plan.overrides}" if plan.overrides else "")
    )
    print(header, flush=True)
    lines, outcomes = [header], []
    for seed in plan.seeds:
        outcome = in_fresh_home("distillation", bench_seed, plan, seed)
        outcomes.append(outcome)
        lines += seed_lines(plan, outcome)
        print("\n".join(seed_lines(plan, outcome)), flush=True)
    lines += summary_lines(plan, outcomes)
    lines.append(f"bench wall time {(time.time() - began) / 60:.1f} min")
    print("\n".join(lines[-len(ARMS) - 1 :]), flush=True)
    if write:
        write_docs(lines, ".venv/bin/python bench/distillation.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
