"""A stalled trainer: the trainer of a real run is stopped (SIGSTOP) for minutes while its environment keeps
producing; the trajectory API's queue and memory must stay under the run's cap, and the run must complete after
SIGCONT.

The environment is tests/fixtures/stall/firehose_env.py: it makes groups without sampling (as one with its own
inference would), so nothing but back-pressure stops it, and its own limit (env.max_batches_offpolicy) is set far
above the cap, so what holds the queue is the cap (trainer.max_queued_batches, at its default unless given).
The peer, measured in the same run, is the API's own resident memory just before the stall: the figures are the
peak sequences held over the cap, and the API's RSS growth over the whole stall and after the queue filled.

    .venv/bin/python bench/stall.py [--stall-seconds 300] [--no-report]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "stall"
HEADING = "## Stalled trainer"
INTRO = (
    "`bench/stall.py`: a real run's trainer stopped (SIGSTOP) while its environment keeps producing groups "
    "without sampling; the trajectory API's queue (sequences held, queued + buffered) and resident memory are "
    "sampled each second, against the run's cap (`trainer.max_queued_batches` x `batch_size`) and the API's RSS "
    "just before the stall. Targets: peak held <= cap, RSS flat once the queue is full, the run completes after "
    "SIGCONT.\n"
)
SAMPLE_S = 1.0
TIMEOUT_S = 600.0


@dataclass
class Stall:
    cap: int = 0
    group: int = 4
    rss_before_mib: float = 0.0
    held: list[int] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)

    def full_at(self) -> int:
        """The first sample at which the queue held the cap less one group, else the last sample."""
        return next((i for i, n in enumerate(self.held) if n >= self.cap - self.group), len(self.held) - 1)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def api_health(run_id: str) -> dict[str, Any]:
    from hermes_nb.protocol.auth import bearer_headers
    from hermes_nb.protocol.run_state import read_run_state
    from hermes_nb.system import home
    from hermes_nb.system.secrets import read_run_secret

    run_dir = home.run_dir(run_id)
    port = read_run_state(run_dir).api_port
    answer = httpx.get(f"http://127.0.0.1:{port}/health", headers=bearer_headers(read_run_secret(run_dir)), timeout=10)
    health: dict[str, Any] = answer.raise_for_status().json()
    return health


def wait_for(run_id: str, done: Any, timeout: float) -> Any:
    from hermes_nb.api import rl_check_status

    deadline = time.monotonic() + timeout
    while not done(status := run(rl_check_status(run_id))):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s; last status:\n{status}")
        time.sleep(0.5)
    return status


def sample(run_id: str, api: psutil.Process, stall: Stall, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        health = api_health(run_id)
        stall.held.append(int(health["held_sequences"]))
        stall.steps.append(int(health["current_step"]))
        stall.rss_mib.append(api.memory_info().rss / 2**20)
        time.sleep(SAMPLE_S)


def bench(args: argparse.Namespace) -> tuple[Stall, float, str]:
    """(the stall's samples, seconds from SIGCONT to the run's completion, the run id)."""
    from hermes_nb.api import rl_select_environment, rl_start_training
    from hermes_nb.protocol.run_state import read_run_state
    from hermes_nb.system import home

    run(rl_select_environment("firehose"))
    settings: dict[str, Any] = {
        "group_size": args.group_size,
        "batch_size": args.batch_size,
        "max_token_length": args.sequence_tokens,
        "sequence_tokens": args.sequence_tokens,
        "max_batches_offpolicy": 100,
        "max_num_workers": 4,
        "steps_per_eval": 0,
        "trainer.save_checkpoint_interval": 0,
        "wandb.mode": "disabled",
    }
    if args.cap_batches is not None:
        settings["trainer.max_queued_batches"] = args.cap_batches
    start = run(rl_start_training(total_steps=args.steps, **settings))
    wait_for(start.run_id, lambda s: s.step >= 2 or s.is_terminal, TIMEOUT_S)
    pids = {name: rec.pid for name, rec in read_run_state(home.run_dir(start.run_id)).processes.items()}
    api = psutil.Process(pids["api"])
    stall = Stall(group=args.group_size, cap=int(api_health(start.run_id)["max_queued_sequences"]))
    stall.rss_before_mib = api.memory_info().rss / 2**20
    os.kill(pids["trainer"], signal.SIGSTOP)
    try:
        sample(start.run_id, api, stall, args.stall_seconds)
    finally:
        os.kill(pids["trainer"], signal.SIGCONT)
        resumed = time.monotonic()
    done = wait_for(start.run_id, lambda s: s.is_terminal, TIMEOUT_S)
    if done.status != "completed":
        raise SystemExit(f"the run did not complete after SIGCONT:\n{done}")
    return stall, time.monotonic() - resumed, start.run_id


def report_lines(args: argparse.Namespace, stall: Stall, completed_s: float, refusals: int) -> list[str]:
    full = stall.full_at()
    after_full = max(stall.rss_mib[full:]) - stall.rss_mib[full]
    peak_rss = max(stall.rss_mib)
    return [
        f"command: .venv/bin/python bench/stall.py --stall-seconds {args.stall_seconds:g}",
        f"run: batch {args.batch_size} sequences, groups of {args.group_size}, {args.sequence_tokens} tokens each, "
        f"{args.steps} steps; cap {stall.cap} sequences; host load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
        "the environment's own limit: 100 batches (env.max_batches_offpolicy), so the cap is what holds it",
        f"trainer stopped for {args.stall_seconds:g} s ({len(stall.held)} samples); its step stayed "
        f"{'constant' if len(set(stall.steps)) == 1 else 'NOT constant'} ({stall.steps[0]})",
        f"sequences held: peak {max(stall.held)} of cap {stall.cap} (ratio {max(stall.held) / stall.cap:.2f}; "
        f"target <= 1.00), full after {full * SAMPLE_S:.0f} s",
        f"API RSS: {stall.rss_before_mib:.1f} MiB before the stall, peak {peak_rss:.1f} MiB "
        f"(ratio {peak_rss / stall.rss_before_mib:.3f}), growth after the queue filled {after_full:+.2f} MiB",
        f"posts refused with 503 (queue full): {refusals}",
        f"after SIGCONT the run completed in {completed_s:.1f} s",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stall-seconds", type=float, default=300.0, help="how long the trainer is stopped")
    parser.add_argument(
        "--cap-batches", type=int, default=None, help="trainer.max_queued_batches (default: its default)"
    )
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--sequence-tokens", type=int, default=256)
    # The environment stops once the queue holds what the remaining steps need: the stall starts at step 2 or 3,
    # so 10 steps leave 7 batches to make, more than the default cap of 4.
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--no-report", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hermes-nb-stall-") as tmp:
        os.environ["HERMES_NB_HOME"] = tmp
        os.environ["HERMES_NB_ENV_PATH"] = str(FIXTURES)
        os.environ.setdefault("WANDB_MODE", "disabled")
        from hermes_nb.system.home import run_paths

        stall, completed_s, run_id = bench(args)
        refusals = run_paths(run_id).logs["api"].read_text().count("-> 503:")
    lines = report_lines(args, stall, completed_s, refusals)
    print("\n".join(lines))
    if not args.no_report:
        sys.path.insert(0, str(REPO / "bench"))
        from report import append_run, run_block

        append_run(HEADING, INTRO, run_block(f"trainer stopped {args.stall_seconds:g} s", lines))
    if max(stall.held) > stall.cap:
        raise SystemExit("target missed: the queue held more than its cap")


if __name__ == "__main__":
    main()
