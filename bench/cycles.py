"""N start -> first step -> stop cycles from one real IPython kernel: what they leave behind, and what a cycle costs.

    .venv/bin/python bench/cycles.py [--cycles 100] [--write]

Each cycle, in the kernel (jupyter_client drives it as a notebook front end does): ``%rl_start`` on the embedded
default (configs/quick_test.yaml, a long ``total_steps``), ``%rl_watch`` shown, a wait until the trainer has
stepped once (the first row of ``metrics.jsonl``), ``%rl_stop``. Measured:

- leaked processes: any process of a stopped run still alive (the pids and start times ``run.json`` recorded);
- leaked ports: a stopped run's API or inference port still listened on by anyone;
- the kernel's leaked threads, file descriptors, children and listening ports (``hermes_nb.system.footprint``,
  read inside the kernel), after the cycles against the footprint after the first cycle (which loads what stays
  loaded: matplotlib's fonts, asyncio's worker pool); targets: 0 of each;
- the kernel's RSS growth over the same cycles, and per cycle;
- seconds per cycle (start -> first step, stop), and their ratio to the floor under any trainer start measured in
  the same run: a Python that imports torch and transformers (``bench/startup.py``'s peer).

``--write`` appends the figures to the Cycles section of docs/benchmarks.md (``bench/report.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))  # the kernel driver the kernel-side tests use

import psutil  # after the path set-up  # noqa: E402
from kernel_session import SETTLED_LEAKS, KernelSession  # noqa: E402
from report import append_run, run_block  # noqa: E402
from startup import import_floor_seconds  # noqa: E402

HEADING = "## Cycles"
INTRO = (
    "`bench/cycles.py`: start -> first trainer step -> stop, again and again from one real kernel "
    "(configs/quick_test.yaml). Leaks are counted after the cycles against the state after the first one; "
    "targets: 0 of each.\n"
)
LONG_RUN = "total_steps=1000"
FIRST_STEP_TIMEOUT_S = 300

KERNEL_SETUP = (
    f"""
%load_ext hermes_nb
import gc, json, threading, time
from hermes_nb import run_sync
from hermes_nb.api import rl_check_status
from hermes_nb.system.footprint import footprint, leaks

def cycle():
    t0 = time.monotonic()
    run_id = get_ipython().run_line_magic("rl_start", "{LONG_RUN}").run_id
    display(get_ipython().run_line_magic("rl_watch", ""))
    while (status := run_sync(rl_check_status(run_id))).step < 1:
        assert not status.is_terminal and time.monotonic() - t0 < {FIRST_STEP_TIMEOUT_S}, status
        time.sleep(0.1)
    t1 = time.monotonic()
    stopped = get_ipython().run_line_magic("rl_stop", "")
    t2 = time.monotonic()
    gc.collect()
    print(json.dumps({{"run_id": run_id, "status": stopped.status, "first_step_s": t1 - t0, "stop_s": t2 - t1,
                      "rss": footprint().rss_bytes}}))

"""
    + SETTLED_LEAKS
)


def run_leftovers(run_id: str) -> tuple[list[str], list[int]]:
    """The processes of a stopped run still alive, and its ports still listened on (by anyone)."""
    from hermes_nb.protocol.run_state import read_run_state
    from hermes_nb.system import home
    from hermes_nb.system.processes import is_same_process_alive

    state = read_run_state(home.run_dir(run_id))
    alive = [f"{name} {record.pid}" for name, record in state.processes.items() if is_same_process_alive(record)]
    ports = {state.api_port, state.inference_port} - {None}
    listening = {c.laddr.port for c in psutil.net_connections("inet") if c.status == "LISTEN"}
    return alive, sorted(p for p in ports if p in listening)


def prepare_home() -> None:
    from hermes_nb.api import rl_load_config, rl_select_environment

    asyncio.run(rl_select_environment("arithmetic"))
    asyncio.run(rl_load_config(ROOT / "configs" / "quick_test.yaml"))


def one_cycle(kernel: KernelSession) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(kernel.run("cycle()").strip().splitlines()[-1])
    record["processes"], record["ports"] = run_leftovers(record["run_id"])
    return record


def summary(cycles: list[dict[str, Any]], kernel_leaks: dict[str, Any], floor: float, load: str) -> list[str]:
    first = [c["first_step_s"] for c in cycles]
    stop = [c["stop_s"] for c in cycles]
    total = [a + b for a, b in zip(first, stop, strict=True)]
    rss_mib = [c["rss"] / 2**20 for c in cycles]
    half = len(cycles) // 2  # growth that goes on after warm-up shows here; a plateau does not
    procs = [p for c in cycles for p in c["processes"]]
    ports = [p for c in cycles for p in c["ports"]]
    return [
        f"cycles: {len(cycles)}; load average before: {load}",
        f"leaked run processes: {len(procs)} {procs[:5]}",
        f"leaked run ports: {len(ports)} {ports[:5]}",
        f"kernel, after cycle 1 -> after cycle {len(cycles)}: threads +{len(kernel_leaks['threads'])} "
        f"{kernel_leaks['threads'][:5]}, OS threads {kernel_leaks['os_threads']:+d}, fds {kernel_leaks['fds']:+d}, "
        f"children {len(kernel_leaks['children'])}, listening ports {len(kernel_leaks['listening_ports'])}",
        f"kernel RSS: {rss_mib[0]:.1f} MiB after cycle 1 -> {rss_mib[-1]:.1f} MiB after cycle {len(cycles)} "
        f"({rss_mib[-1] - rss_mib[0]:+.1f} MiB, {(rss_mib[-1] - rss_mib[0]) / max(len(cycles) - 1, 1):+.2f} MiB/cycle; "
        f"second half {(rss_mib[-1] - rss_mib[half]) / max(len(cycles) - 1 - half, 1):+.2f} MiB/cycle)",
        f"seconds per cycle: median {statistics.median(total):.1f} (start -> first step "
        f"{statistics.median(first):.1f}, stop {statistics.median(stop):.1f}); min {min(total):.1f}, "
        f"max {max(total):.1f}",
        f"import floor (python + torch + transformers) median {floor:.2f} s; "
        f"ratio start -> first step / floor: {statistics.median(first) / floor:.1f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--write", action="store_true", help="append the figures to docs/benchmarks.md")
    args = parser.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(HERMES_NB_HOME=tmp, WANDB_MODE="offline", WANDB_SILENT="true", OMP_NUM_THREADS="1")
        prepare_home()
        floor = statistics.median(import_floor_seconds() for _ in range(3))
        kernel = KernelSession()
        try:
            kernel.run(KERNEL_SETUP)
            cycles = [one_cycle(kernel)]
            kernel.run("quiet()\n_before = footprint()")
            for i in range(1, args.cycles):
                cycles.append(one_cycle(kernel))
                print(
                    f"cycle {i + 1}/{args.cycles}: {cycles[-1]['first_step_s'] + cycles[-1]['stop_s']:.1f} s, "
                    f"kernel RSS {cycles[-1]['rss'] / 2**20:.1f} MiB",
                    flush=True,
                )
            kernel_leaks = json.loads(kernel.run("print(json.dumps(settled_leaks(_before).model_dump()))"))
        finally:
            kernel.shutdown()
    lines = summary(cycles, kernel_leaks, floor, load)
    print("\n".join(lines))
    if args.write:
        command = f".venv/bin/python bench/cycles.py --cycles {args.cycles} --write"
        append_run(HEADING, INTRO, run_block(f"`{command}`", lines))


if __name__ == "__main__":
    main()
