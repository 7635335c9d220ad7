"""CPU time per training step of each process of a quickstart run: the load-robust way to compare two trees.

    .venv/bin/python bench/process_cpu.py [--first 100] [--last 500]
    PYTHONPATH=OLD_TREE .venv/bin/python bench/process_cpu.py --tree OLD_TREE   # an older checkout, same script

Wall time per step on a shared machine moves by tens of percent from run to run; the CPU seconds each process
spends per step move much less, and say which process a difference comes from. The run is the quickstart config
(``configs/quickstart.yaml`` of ``--tree``) started through the public API only (``hermes_nb.api``), so the same
script measures an older tree put first on ``PYTHONPATH``. CPU time is read with psutil between the trainer's
steps ``--first`` and ``--last``, for the run's processes and what they started (W&B's service), then the run is
stopped. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import psutil
from run_processes import run_processes  # bench/, this script's folder

POLL_S = 0.2


def cpu_seconds(processes: dict[str, psutil.Process], *, reaped_children: bool = False) -> dict[str, float]:
    """CPU seconds of each process; with ``reaped_children``, also those of the children it has waited for (a
    process started and ended between two looks, like verifiers' chat program per episode, is seen only there)."""
    seconds = {}
    for label, process in processes.items():
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        seconds[label] = times.user + times.system
        if reaped_children:
            seconds[label] += times.children_user + times.children_system
    return seconds


def wait_for_step(run_id: str, step: int) -> None:
    from hermes_nb.api import rl_check_status

    while (status := asyncio.run(rl_check_status(run_id))).step < step:
        if status.is_terminal:
            raise SystemExit(f"the run ended before step {step}: {status}")
        time.sleep(POLL_S)


def measure(tree: Path, first: int, last: int) -> dict[str, object]:
    from hermes_nb.api import rl_load_config, rl_select_environment, rl_start_training, rl_stop_training

    asyncio.run(rl_select_environment("arithmetic"))
    asyncio.run(rl_load_config(str(tree / "configs" / "quickstart.yaml")))
    start = asyncio.run(rl_start_training())
    try:
        wait_for_step(start.run_id, first)
        processes = run_processes(Path(start.run_dir))
        before, started = cpu_seconds(processes), time.monotonic()
        wait_for_step(start.run_id, last)
        after, ended = cpu_seconds(processes), time.monotonic()
    finally:
        asyncio.run(rl_stop_training(start.run_id))
    steps = last - first
    per_role: dict[str, float] = {}
    for label in after.keys() & before.keys():
        role = label.split("/")[0] + ("/children" if "/" in label else "")
        per_role[role] = per_role.get(role, 0.0) + 1000 * (after[label] - before[label]) / steps
    return {
        "tree": str(tree.resolve()),
        "steps": steps,
        "wall_ms_per_step": round(1000 * (ended - started) / steps, 1),
        "cpu_ms_per_step": {role: round(ms, 2) for role, ms in sorted(per_role.items())},
        "load": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--first", type=int, default=100, help="the step the measurement starts at")
    parser.add_argument("--last", type=int, default=500, help="the step it ends at")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hermes-nb-cpu-") as home:
        os.environ.update(HERMES_NB_HOME=home, WANDB_MODE="offline", WANDB_SILENT="true")
        print(json.dumps(measure(args.tree, args.first, args.last)))


if __name__ == "__main__":
    main()
