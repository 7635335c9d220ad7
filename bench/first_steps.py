"""Seconds of the race's first trainer steps: hermes-nb's side of ``bench/vs_trl.py``, without TRL and the target.

The race is mostly decided in its first 50-200 steps, and those are the costliest of a run: what starts beside
them (W&B, the evaluation before training) competes with them for the two cores. This bench starts the race's run
(``vs_trl.race_overrides``, through the public API), waits for step ``--steps``, stops the run and prints the
seconds from the end of step 1 to the end of steps 20, 50 and ``--steps`` (``metrics.jsonl``'s clock), with the
W&B mode of ``--wandb``. Compare two trees with ``bench/trees.py`` (this script and ``vs_trl.py`` copied into
the older one when it lacks them):

    .venv/bin/python bench/first_steps.py [--seed 0] [--steps 100] [--wandb offline|disabled]
    .venv/bin/python bench/trees.py --before OLD --rounds 3 --keep "steps" -- first_steps.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from learning import QUICKSTART_BENCH, read_rows  # noqa: E402
from vs_trl import quickstart_learning_rate, race_overrides  # noqa: E402

POLL_S = 0.2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--wandb", choices=["offline", "disabled"], default="offline")
    args = parser.parse_args()
    os.environ["HERMES_NB_HOME"] = tempfile.mkdtemp(prefix="hermes-nb-first-steps-")
    from hermes_nb.api import (
        rl_check_status,
        rl_load_config,
        rl_select_environment,
        rl_start_training,
        rl_stop_training,
    )
    from hermes_nb.system.home import run_paths

    asyncio.run(rl_select_environment("arithmetic"))
    asyncio.run(rl_load_config(QUICKSTART_BENCH.config))
    overrides = race_overrides(args.seed, quickstart_learning_rate(), args.eval_every)
    started = asyncio.run(rl_start_training(**overrides, **{"wandb.mode": args.wandb}))
    try:
        while (status := asyncio.run(rl_check_status(started.run_id))).step < args.steps:
            if status.is_terminal:
                raise SystemExit(f"the run ended at step {status.step}: {status.status} {status.error}")
            time.sleep(POLL_S)
    finally:
        asyncio.run(rl_stop_training(started.run_id))
    finished = {row["step"]: row["time"] for row in read_rows(run_paths(started.run_id).metrics)}
    marks = sorted({20, 50, args.steps} & set(finished))
    spans = ", ".join(f"1->{m} {finished[m] - finished[1]:.2f} s" for m in marks)
    print(f"steps (seed {args.seed}, W&B {args.wandb}, load {os.getloadavg()[0]:.1f}): {spans}")


if __name__ == "__main__":
    main()
