"""The trainer's step in its run against the same step alone: how much of it is contention inside the trainer process.

The trainer process trains on its main thread while its sampler thread and its inference server's thread answer
the environment, all under one GIL, on cores the environment and the API share. This bench runs the race's
config (``vs_trl.race_to_step``, through the public API) to step ``--steps``, stops it, then replays the batches
the run trained on (``trajectories.jsonl.gz``) through ``train_step`` on a fresh ``LocalBackend`` of the same model,
in this process, with one torch thread like the run's trainer and nothing else running. Per range of steps it
prints the median of the run's ``train/compute_seconds`` (train step, recording the batch, publishing the
weights) and of the replayed ``train_step`` alone. The replay starts from the base weights, not the run's, so
it does the same arithmetic on the same batch shapes, not the same numbers.

    .venv/bin/python bench/step_contention.py [--seed 0] [--steps 150]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from learning import read_rows  # noqa: E402
from vs_trl import race_to_step  # noqa: E402

RANGES = ((2, 20), (20, 50), (50, 100), (100, 10**9))


def replay_seconds(run_id: str) -> dict[int, float]:
    """Seconds of ``train_step`` on each recorded batch, alone in this process."""
    import torch

    from hermes_nb.config import RunConfig
    from hermes_nb.protocol.recorded_batches import read_trajectories
    from hermes_nb.system.home import embedded_base_model_dir, run_paths
    from hermes_nb.trainer.local.local_backend import LocalBackend
    from hermes_nb.trainer.run.loop import train_step

    torch.set_num_threads(1)  # the run's trainer: half of two cores (trainer.main.default_torch_threads)
    paths = run_paths(run_id)
    trainer = RunConfig.load(paths.config).trainer
    backend = LocalBackend(embedded_base_model_dir(), seed=trainer.seed)
    seconds = {}
    for step, batch in read_trajectories(paths.trajectories):
        began = time.perf_counter()
        train_step(backend, batch, trainer)
        seconds[step] = time.perf_counter() - began
    return seconds


def medians_ms(seconds: dict[int, float], low: int, high: int) -> float | None:
    inside = [s for step, s in seconds.items() if low <= step < high]
    return 1000 * statistics.median(inside) if inside else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    os.environ["HERMES_NB_HOME"] = tempfile.mkdtemp(prefix="hermes-nb-step-contention-")
    os.environ.setdefault("WANDB_MODE", "offline")
    from hermes_nb.system.home import run_paths

    run_id = race_to_step(args.seed, args.steps)
    load = os.getloadavg()[0]
    in_run = {row["step"]: row["values"]["train/compute_seconds"] for row in read_rows(run_paths(run_id).metrics)}
    alone = replay_seconds(run_id)
    print(f"race config, seed {args.seed}, {len(alone)} steps, load {load:.1f} at the run's end; median ms a step:")
    for low, high in RANGES:
        ours, solo = medians_ms(in_run, low, high), medians_ms(alone, low, high)
        if ours is None or solo is None:
            continue
        label = f"steps {low}-{high - 1}" if high < 10**9 else f"steps {low}-"
        print(f"  {label:<12} in the run {ours:6.1f}   train_step alone {solo:6.1f}   ratio {ours / solo:.2f}")


if __name__ == "__main__":
    main()
