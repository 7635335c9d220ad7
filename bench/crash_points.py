"""The whole crash-point matrix (issue #15, item 6): ``kill -9`` of the supervisor, the API, the trainer and the
environment at start-up, in steady state, during a checkpoint write and during a stop, each on a real run of the
quick config (tests/e2e/crash_points.py says how each phase is caught and what is checked). The suite runs a
sample of it (tests/e2e/test_crash_points.py); this runs all 16 cases, one after the other, in a fresh home.

    .venv/bin/python bench/crash_points.py [--cases supervisor@stop,api@startup] [--write]

Prints one line per case: the status read after the kill and how long after (the bound is 2 s), how long until no
process of the run was left, the last listed checkpoint, the resume, and the result; then how each phase was
caught and every problem found. ``--write`` appends the table to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))  # what the case runner imports (run_helpers)

from report import append_run, run_block  # noqa: E402

HEADING = "## Crash points"
INTRO = (
    "`bench/crash_points.py`: `kill -9` of each process of a real run (quick config) at each phase: start-up, "
    "steady state, mid-checkpoint write (the trainer frozen with SIGSTOP inside the write), and during a stop. "
    "Per case: the terminal status a separate `rl_check_status` call read and how long after the kill (target "
    "<= 2 s; the API or the environment killed during a stop leaves the stop to go on, `stopping` until the "
    "trainer has saved its final checkpoint and exited, so there the time runs from the trainer's exit), seconds "
    "until no process of the run was left, the last listed checkpoint (loaded with "
    "`from_pretrained`) and the resume from it (or its refusal when none is listed). Metrics and checkpoint "
    "files are checked to parse up to their last complete line.\n"
)


@functools.cache
def runner() -> ModuleType:
    """tests/e2e/crash_points.py, the case runner of the suite's sample; loaded by its path, as this file has
    the same name."""
    spec = importlib.util.spec_from_file_location("crash_point_cases", ROOT / "tests" / "e2e" / "crash_points.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def all_cases() -> list[tuple[str, str]]:
    cases = runner()
    return [(victim, phase) for phase in cases.PHASES for victim in cases.VICTIMS]


def parse_cases(text: str | None) -> list[tuple[str, str]]:
    if not text:
        return all_cases()
    chosen = []
    for name in text.split(","):
        victim, _, phase = name.strip().partition("@")
        if (victim, phase) not in all_cases():
            raise SystemExit(f"--cases: {name!r} is not victim@phase (e.g. trainer@checkpoint)")
        chosen.append((victim, phase))
    return chosen


def bench(cases: list[tuple[str, str]]) -> tuple[list[str], int]:
    """The table's lines, and how many cases failed."""
    from run_helpers import QUICK_TEST_CONFIG

    from hermes_nb.api import rl_load_config, rl_select_environment

    asyncio.run(rl_select_environment("arithmetic"))
    asyncio.run(rl_load_config(QUICK_TEST_CONFIG))
    runs, results = runner(), []
    for victim, phase in cases:
        started = time.monotonic()
        results.append(runs.run_case(victim, phase))
        print(f"{victim}@{phase}: {'ok' if results[-1].passed else 'FAIL'} ({time.monotonic() - started:.0f} s)")
    failed = sum(not r.passed for r in results)
    return [*runs.table(results), f"{len(results) - failed} of {len(results)} cases passed"], failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", help="victim@phase,... (default: all 16)")
    parser.add_argument("--write", action="store_true", help="append the table to docs/benchmarks.md")
    args = parser.parse_args()
    cases = parse_cases(args.cases)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hermes-nb-crash-") as tmp:
        os.environ.update(HERMES_NB_HOME=tmp, WANDB_MODE="offline", WANDB_SILENT="true", OMP_NUM_THREADS="1")
        lines, failed = bench(cases)
    lines.append(
        f"{time.monotonic() - started:.0f} s in all; host load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print("\n".join(lines))
    if args.write:
        append_run(HEADING, INTRO, run_block(f"{len(cases)} cases", lines))
    if failed:
        raise SystemExit(f"{failed} of {len(cases)} cases failed")


if __name__ == "__main__":
    main()
