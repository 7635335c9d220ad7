"""Seconds of the race's first trainer steps: hermes-nb's side of ``bench/vs_trl.py``, without TRL and the target.

The race is mostly decided in its first 50-200 steps, and those are the costliest of a run: what starts beside
them (W&B, the evaluation before training) competes with them for the two cores. This bench starts the race's run
(``vs_trl.race_to_step``, through the public API), waits for step ``--steps``, stops the run and prints the
seconds from the end of step 1 to the end of steps 20, 50 and ``--steps`` (``metrics.jsonl``'s clock), with the
W&B mode of ``--wandb``. Compare two trees with ``bench/trees.py`` (this script and ``vs_trl.py`` copied into
the older one when it lacks them):

    .venv/bin/python bench/first_steps.py [--seed 0] [--steps 100] [--wandb offline|disabled]
    .venv/bin/python bench/trees.py --before OLD --rounds 3 --keep "steps" -- first_steps.py
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from learning import read_rows  # noqa: E402
from vs_trl import race_to_step  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--wandb", choices=["offline", "disabled"], default="offline")
    args = parser.parse_args()
    os.environ["HERMES_NB_HOME"] = tempfile.mkdtemp(prefix="hermes-nb-first-steps-")
    from hermes_nb.system.home import run_paths

    run_id = race_to_step(args.seed, args.steps, args.eval_every, **{"wandb.mode": args.wandb})
    finished = {row["step"]: row["time"] for row in read_rows(run_paths(run_id).metrics)}
    marks = sorted({20, 50, args.steps} & set(finished))
    spans = ", ".join(f"1->{m} {finished[m] - finished[1]:.2f} s" for m in marks)
    print(f"steps (seed {args.seed}, W&B {args.wandb}, load {os.getloadavg()[0]:.1f}): {spans}")


if __name__ == "__main__":
    main()
