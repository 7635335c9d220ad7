"""What the next run's warm kit costs the run that makes it: seconds per trainer step of a warm first run, with the
kit for the following run made as designed (once the run has trained its first step) against the same run with
no next kit, and a cold run, alternating, each in a fresh home.

The kit imports at the lowest scheduling weight (``system.warm_process``), so it takes only what the run's
processes leave idle; what it still costs them (caches, memory bandwidth, the run's waits for a core) is this
bench's figure. A run is the race of ``bench/vs_trl.py`` (the quickstart's settings, 2-digit addition) stopped
after ``--seconds`` of training, which is about how long the next kit imports on a quiet two-core machine.

    .venv/bin/python bench/next_kit_cost.py [--rounds 3] [--seconds 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import vs_trl

UNREACHABLE_TARGET = 2.0  # an accuracy above 100%: each run trains for ``--seconds``


def one_run(variant: str, seed: int, args: argparse.Namespace) -> float:
    """Median seconds per step of one run of ``variant``, in a fresh home."""
    from hermes_nb.runs.supervision import warm_start

    race = argparse.Namespace(pause=args.pause, eval_every=10, max_seconds=args.seconds)
    made_as_designed = warm_start.prepare_next
    if variant == "no next kit":
        warm_start.prepare_next = lambda paths: None
    try:
        with tempfile.TemporaryDirectory() as home:
            os.environ["HERMES_NB_HOME"] = home
            start = vs_trl.cold_first_run if variant == "cold" else vs_trl.warm_first_run
            curve = start(seed, vs_trl.quickstart_learning_rate(), race, UNREACHABLE_TARGET)
            warm_start.discard()
    finally:
        warm_start.prepare_next = made_as_designed
    return curve.seconds_per_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0, help="training seconds per run")
    parser.add_argument("--pause", type=float, default=10.0, help="seconds from the selection to a warm start")
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    variants = ("next kit", "no next kit", "cold")
    samples: dict[str, list[float]] = {variant: [] for variant in variants}
    for seed in range(args.rounds):
        for variant in variants:
            samples[variant].append(one_run(variant, seed, args))
            print(f"round {seed}: {variant:12s} {samples[variant][-1]:.4f} s/step", flush=True)
    for variant, values in samples.items():
        print(f"{variant:12s} median {statistics.median(values):.4f} s/step  {[round(v, 4) for v in values]}")
    cost = statistics.median(samples["next kit"]) / statistics.median(samples["no next kit"])
    print(f"a run making the next kit / one that does not, per step: {cost:.2f}x; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
