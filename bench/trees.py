"""One bench script run against two checkouts of hermes-nb, alternating, so both see the same machine.

A change that should not change behaviour (a refactor) is shown to read the same as the code before it by running
the same bench on both trees in one session: before, after, before, after, ... Each run imports its own tree
(``PYTHONPATH`` set to it) and runs that tree's copy of the script, in this venv. The lines each run prints that
match ``--keep`` are collected per tree and printed side by side at the end.

    .venv/bin/python bench/trees.py --before OLD_CHECKOUT --rounds 3 --keep "median" -- startup.py --runs 1
    .venv/bin/python bench/trees.py --before OLD_CHECKOUT --rounds 2 --keep "best lift|s/step" -- learning.py \\
        --seeds 0 --budget 120

An old checkout is, e.g., ``git worktree add --detach /tmp/before <commit>``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_once(tree: Path, script: str, arguments: list[str]) -> tuple[str, float, float]:
    """(stdout, wall seconds, load average at the start) of ``tree``'s ``bench/SCRIPT`` on ``tree``'s package."""
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    load = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(tree / "bench" / script), *arguments],
        cwd=tree,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = done.stdout[-2000:] + done.stderr[-4000:]
        raise SystemExit(f"{tree}: bench/{script} exited {done.returncode}:\n{tail}")
    return done.stdout, time.perf_counter() - started, load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="the checkout to compare against")
    parser.add_argument("--after", type=Path, default=ROOT, help="the checkout under test (default: this one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", default=".", help="regex: the output lines to collect")
    parser.add_argument("script", help="the bench script, relative to bench/ (e.g. startup.py)")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="the script's own arguments (after --)")
    args = parser.parse_args()
    arguments = [a for a in args.arguments if a != "--"]
    keep = re.compile(args.keep)
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    collected: dict[str, list[str]] = {name: [] for name in trees}
    for round_number in range(1, args.rounds + 1):
        for name, tree in trees.items():
            out, seconds, load = run_once(tree, args.script, arguments)
            lines = [line for line in out.splitlines() if keep.search(line)]
            collected[name] += [f"round {round_number} (load {load:.1f}, {seconds:.0f} s): {line}" for line in lines]
            print(f"[{name} round {round_number}] " + " | ".join(lines), flush=True)
    for name, lines in collected.items():
        print(f"\n{name} ({trees[name]}):")
        print("\n".join(f"  {line}" for line in lines))


if __name__ == "__main__":
    main()
