"""What the next run's warm kit costs the run beside which it imports: seconds per trainer step of a kernel's first
run, warm, holding one kit (``HERMES_NB_WARM_KITS=1``: the kit for the run after it is made once it has trained its
first step, and imports beside it) against the same run holding two (the default: the spare was made before the
run, while nothing trained, so nothing imports beside it), and a cold run, alternating, each in a fresh home.

The kit imports at the lowest scheduling weight (``system.warm_process``), so it takes only what the run's
processes leave idle; what it still costs them (caches, memory bandwidth, the run's waits for a core) is this
bench's figure. A run is the race of ``bench/vs_trl.py`` (the quickstart's settings, 2-digit addition), selected,
started ``--pause`` seconds later and stopped after ``--seconds`` of training, about how long a kit imports on a
quiet two-core machine. Two figures a run: the median step, and the seconds per step up to its last evaluation
(what a race pays: the evaluations share the cores too).

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
KITS_HELD = {"one kit": "1", "two kits": "2"}


def one_run(variant: str, seed: int, args: argparse.Namespace) -> tuple[float, float]:
    """The median seconds per step of one run of ``variant`` in a fresh home, and its seconds per step up to its
    last evaluation."""
    from hermes_nb.runs.supervision import warm_start

    race = argparse.Namespace(pause=args.pause, eval_every=10, max_seconds=args.seconds)
    os.environ[warm_start.KITS_VAR] = KITS_HELD.get(variant, "2")
    try:
        with tempfile.TemporaryDirectory() as home:
            os.environ["HERMES_NB_HOME"] = home
            start = vs_trl.cold_first_run if variant == "cold" else vs_trl.warm_first_run
            curve = start(seed, vs_trl.quickstart_learning_rate(), race, UNREACHABLE_TARGET)
            warm_start.discard()
    finally:
        del os.environ[warm_start.KITS_VAR]
    step, seconds, _ = curve.points[-1]
    return curve.seconds_per_step, seconds / step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0, help="training seconds per run")
    parser.add_argument("--pause", type=float, default=10.0, help="seconds from the selection to a warm start")
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    variants = ("one kit", "two kits", "cold")
    samples: dict[str, list[tuple[float, float]]] = {variant: [] for variant in variants}
    for seed in range(args.rounds):
        for variant in variants:
            median_step, to_last_eval = one_run(variant, seed, args)
            samples[variant].append((median_step, to_last_eval))
            print(
                f"round {seed}: {variant:8s} median {median_step:.4f} s/step, to the last evaluation "
                f"{to_last_eval:.4f} s/step",
                flush=True,
            )
    medians = {}
    for variant, values in samples.items():
        medians[variant] = [statistics.median(v[i] for v in values) for i in (0, 1)]
        print(
            f"{variant:8s} median step {medians[variant][0]:.4f} s  {[round(v[0], 4) for v in values]}; "
            f"to the last evaluation {medians[variant][1]:.4f} s/step  {[round(v[1], 4) for v in values]}"
        )
    one, two = medians["one kit"], medians["two kits"]
    print(
        f"one kit / two kits: median step {one[0] / two[0]:.2f}x, to the last evaluation {one[1] / two[1]:.2f}x; "
        f"load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
