"""Seconds from ``rl_start_training()`` to the first completed trainer step, on the embedded default.

The peer is the Hermes RL tool's start-up, whose fixed sleeps alone (5 + 30 + 90 + 10 s) come to 135 s before
its status even says "running"; it cannot run here (it needs GPUs and vLLM), so that figure is quoted, not measured.
Also reported, measured in the same run: the bare cost of starting a Python interpreter that imports torch and
transformers, the floor under any trainer start, so the ratio says how much of the start-up is our own.

    .venv/bin/python bench/startup.py [--runs 5]

Three starts per round (``--runs`` rounds), each measured the same way:

- cold: warm starts off (``HERMES_NB_WARM_START=0``) and the kernel's kit ended, as every start was before warm
  starts;
- warm first: the kernel's kits ended, the environment selected (which starts its kits), and the start
  ``--pause`` seconds later (10 by default), as a notebook's first run some seconds after its selection;
- back to back: that run trains ``BACK_TO_BACK_TRAIN_S`` more, is stopped, and the next is started at once, as a
  sweep of short runs or a user who fixes a value and reruns does: it takes the spare kit (with
  ``HERMES_NB_WARM_KITS=1``, the kit that run made once it had trained, still importing).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ANCHOR_FIXED_SLEEPS_SECONDS = 5 + 30 + 90 + 10
# How long the run before a back-to-back start trains past its first step: a kernel holding one kit makes the next
# once a run has trained, within a poll (half a second); a short run of a sweep trains longer than this.
BACK_TO_BACK_TRAIN_S = 3.0


def import_floor_seconds() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, transformers.models.llama"], check=True)
    return time.perf_counter() - started


def one_start(train_after_s: float = 0.0) -> tuple[float, float]:
    """(seconds to status running, seconds to the first metrics row); the run is stopped ``train_after_s`` after
    its first step."""
    from hermes_nb.api import (
        rl_check_status,
        rl_load_config,
        rl_select_environment,
        rl_start_training,
        rl_stop_training,
    )
    from hermes_nb.system.home import run_paths

    root = Path(__file__).resolve().parent.parent
    asyncio.run(rl_select_environment("arithmetic"))
    asyncio.run(rl_load_config(root / "configs" / "quick_test.yaml"))
    started = time.perf_counter()
    result = asyncio.run(rl_start_training(total_steps=50))
    metrics = run_paths(result.run_id).metrics
    running_at = None
    while True:
        if running_at is None and asyncio.run(rl_check_status(result.run_id)).status == "running":
            running_at = time.perf_counter() - started
        if metrics.is_file() and metrics.stat().st_size > 0:
            first_step = time.perf_counter() - started
            break
        if time.perf_counter() - started > 300:
            raise RuntimeError(f"no trainer step within 300 s: {asyncio.run(rl_check_status(result.run_id))}")
        time.sleep(0.02)
    time.sleep(train_after_s)
    asyncio.run(rl_stop_training(result.run_id))
    return running_at or first_step, first_step


def cold_start() -> tuple[float, float]:
    from hermes_nb.runs.supervision import warm_start

    warm_start.discard()
    os.environ[warm_start.WARM_START_VAR] = "0"
    try:
        return one_start()
    finally:
        del os.environ[warm_start.WARM_START_VAR]


def warm_first_start(pause: float) -> tuple[float, float]:
    from hermes_nb.api import rl_select_environment
    from hermes_nb.runs.supervision import warm_start

    warm_start.discard()
    asyncio.run(rl_select_environment("arithmetic"))
    time.sleep(pause)
    return one_start(train_after_s=BACK_TO_BACK_TRAIN_S)


def back_to_back_start() -> tuple[float, float]:
    return one_start()  # at once after the previous run's stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="rounds of a cold, a warm first, a back-to-back start")
    parser.add_argument("--pause", type=float, default=10.0, help="seconds from the selection to the warm first start")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HERMES_NB_HOME"] = tmp
        os.environ.setdefault("WANDB_MODE", "offline")
        floors = [import_floor_seconds() for _ in range(3)]
        cold, warm, back_to_back = [], [], []
        for _ in range(args.runs):
            cold.append(cold_start())
            warm.append(warm_first_start(args.pause))
            back_to_back.append(back_to_back_start())
    floor = statistics.median(floors)
    kits = os.environ.get("HERMES_NB_WARM_KITS", "2")
    print(f"runs: {args.runs} rounds of cold, warm first ({args.pause:g} s after selecting), back to back; {kits} kits")
    for name, samples in (("cold", cold), ("warm first", warm), ("back to back", back_to_back)):
        to_running = statistics.median(s[0] for s in samples)
        to_step = statistics.median(s[1] for s in samples)
        print(f"{name} start -> running            median {to_running:6.2f} s  ({[round(s[0], 2) for s in samples]})")
        print(f"{name} start -> first trainer step median {to_step:6.2f} s  ({[round(s[1], 2) for s in samples]})")
    to_step = statistics.median(s[1] for s in cold)
    print(f"import floor (python + torch + transformers) median {floor:.2f} s")
    print(f"ratio cold first step / import floor: {to_step / floor:.2f}")
    print(f"ratio warm first / cold first step: {statistics.median(s[1] for s in warm) / to_step:.2f}")
    print(f"ratio back to back / cold first step: {statistics.median(s[1] for s in back_to_back) / to_step:.2f}")
    print(
        f"ratio anchor fixed sleeps / ours: {ANCHOR_FIXED_SLEEPS_SECONDS / to_step:.1f}x "
        f"(anchor {ANCHOR_FIXED_SLEEPS_SECONDS} s)"
    )


if __name__ == "__main__":
    main()
