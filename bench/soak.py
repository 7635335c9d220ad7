"""A long real run with evaluations and checkpoints: does any process of it grow, and do its files grow with the
steps and nothing else?

    .venv/bin/python bench/soak.py [--minutes 30] [--sample-seconds 60] [--warmup-minutes 5] [--no-report]

The run is the embedded default on configs/quick_test.yaml (arithmetic, the shipped model), W&B offline, made to
last (a very large ``total_steps``), evaluating every ``--eval-every`` steps and checkpointing every
``--checkpoint-every``; after ``--minutes`` it is stopped with ``rl_stop_training`` (a final checkpoint).

Sampled every ``--sample-seconds``: the resident memory and open file descriptors of every process of the run (the
supervisor, the API, the trainer, the environment and whatever they started, such as W&B's service), the trainer's
step, and the sizes of ``metrics.jsonl``, ``env_metrics.jsonl`` and ``trajectories.jsonl.gz``.

Targets (issue 15): each process's RSS and fd count grow by under 5 % from the end of the warm-up to the end; the
files grow linearly in steps: bytes per step over the second half of the run within 10 % of the first half's
(after the warm-up), where a file that grows with anything else (a rewritten file, a leak into a log) drifts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from report import append_run, run_block  # noqa: E402  (after the path set-up)
from run_processes import run_processes  # noqa: E402

HEADING = "## Soak"
INTRO = (
    "`bench/soak.py`: one long real run (embedded default, configs/quick_test.yaml, W&B offline) with evaluations "
    "and checkpoints, stopped at the end. Every process's RSS and open fds sampled each minute; targets: growth "
    "under 5 % after the warm-up, and the run's files growing linearly in steps (bytes per step, second half "
    "against first half, within 10 %).\n"
)
GROWTH_TARGET = 0.05
LINEARITY_TARGET = 0.10
FILES = ("metrics", "env_metrics", "trajectories")


@dataclass
class Sample:
    elapsed_s: float
    step: int
    rss_mib: dict[str, float]
    fds: dict[str, int]
    file_bytes: dict[str, int]


@dataclass
class Soak:
    run_id: str = ""
    samples: list[Sample] = field(default_factory=list)
    stopped_status: str = ""
    checkpoints: int = 0


def take_sample(run_id: str, started: float) -> Sample:
    from hermes_nb.api import rl_check_status
    from hermes_nb.system.home import run_paths

    paths = run_paths(run_id)
    rss: dict[str, float] = {}
    fds: dict[str, int] = {}
    for label, process in run_processes(paths.run_dir).items():
        try:
            rss[label] = process.memory_info().rss / 2**20
            fds[label] = process.num_fds()
        except psutil.NoSuchProcess:
            continue
    sizes = {name: _size(getattr(paths, name)) for name in FILES}
    step = asyncio.run(rl_check_status(run_id)).step
    return Sample(time.monotonic() - started, step, rss, fds, sizes)


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def soak(args: argparse.Namespace) -> Soak:
    from hermes_nb.api import rl_load_config, rl_select_environment, rl_start_training, rl_stop_training
    from hermes_nb.protocol.checkpoints import read_checkpoints
    from hermes_nb.system.home import run_paths

    asyncio.run(rl_select_environment("arithmetic"))
    asyncio.run(rl_load_config(REPO / "configs" / "quick_test.yaml"))
    settings: dict[str, Any] = {
        "total_steps": 1_000_000,  # the most a config accepts: the run is stopped long before
        "steps_per_eval": args.eval_every,
        "trainer.save_checkpoint_interval": args.checkpoint_every,
    }
    started = time.monotonic()
    result = Soak(run_id=asyncio.run(rl_start_training(**settings)).run_id)
    deadline = started + args.minutes * 60
    while time.monotonic() < deadline:
        result.samples.append(take_sample(result.run_id, started))
        print(_progress(result.samples[-1]), flush=True)
        time.sleep(max(0.0, min(args.sample_seconds, deadline - time.monotonic())))
    result.samples.append(take_sample(result.run_id, started))
    result.stopped_status = asyncio.run(rl_stop_training(result.run_id)).status
    result.checkpoints = len(read_checkpoints(run_paths(result.run_id).checkpoints_index))
    return result


def _progress(sample: Sample) -> str:
    memory = ", ".join(f"{label} {mib:.0f}" for label, mib in sorted(sample.rss_mib.items()))
    return f"{sample.elapsed_s / 60:5.1f} min, step {sample.step}: RSS MiB {memory}"


def growth_lines(samples: list[Sample], warm: Sample) -> tuple[list[str], bool]:
    """Per process: RSS and fds at the end of the warm-up and at the end, and whether both grew under target."""
    last = samples[-1]
    lines, met = [], True
    for label in sorted(warm.rss_mib):
        if label not in last.rss_mib:
            lines.append(f"  {label}: gone by the end (was {warm.rss_mib[label]:.1f} MiB)")
            continue
        rss_growth = last.rss_mib[label] / warm.rss_mib[label] - 1
        fd_growth = last.fds[label] / max(warm.fds[label], 1) - 1
        peak = max(s.rss_mib.get(label, 0.0) for s in samples if s.elapsed_s >= warm.elapsed_s)
        ok = rss_growth < GROWTH_TARGET and fd_growth < GROWTH_TARGET
        met &= ok
        lines.append(
            f"  {label:<32} RSS {warm.rss_mib[label]:7.1f} -> {last.rss_mib[label]:7.1f} MiB ({rss_growth:+.1%}, "
            f"peak {peak:.1f}); fds {warm.fds[label]} -> {last.fds[label]} ({fd_growth:+.1%}){'' if ok else '  MISSED'}"
        )
    return lines, met


def linearity_lines(samples: list[Sample], warm: Sample) -> tuple[list[str], bool]:
    """Bytes per step of each file over the first and the second half of the run after the warm-up."""
    after = [s for s in samples if s.elapsed_s >= warm.elapsed_s]
    if len(after) < 3:
        return [f"  too few samples after the warm-up to compare halves ({len(after)})"], False
    middle = after[len(after) // 2]
    last = after[-1]
    lines, met = [], True
    for name in FILES:
        first = _bytes_per_step(warm, middle, name)
        second = _bytes_per_step(middle, last, name)
        drift = second / first - 1 if first else float("inf")
        ok = abs(drift) <= LINEARITY_TARGET
        met &= ok
        lines.append(
            f"  {name:<13} {first:8.1f} B/step (steps {warm.step}-{middle.step}) vs {second:8.1f} B/step "
            f"(steps {middle.step}-{last.step}): {drift:+.1%}{'' if ok else '  MISSED'}"
        )
    return lines, met


def _bytes_per_step(a: Sample, b: Sample, name: str) -> float:
    return (b.file_bytes[name] - a.file_bytes[name]) / max(b.step - a.step, 1)


def report_lines(args: argparse.Namespace, result: Soak, load: str) -> list[str]:
    samples = result.samples
    warm = next((s for s in samples if s.elapsed_s >= args.warmup_minutes * 60), samples[0])
    growth, growth_met = growth_lines(samples, warm)
    linear, linear_met = linearity_lines(samples, warm)
    last = samples[-1]
    return [
        f"command: .venv/bin/python bench/soak.py --minutes {args.minutes:g} --eval-every {args.eval_every} "
        f"--checkpoint-every {args.checkpoint_every}",
        f"load average before: {load}; {os.cpu_count()} cores",
        f"ran {last.elapsed_s / 60:.1f} min, {last.step} steps ({last.elapsed_s / max(last.step, 1):.3f} s/step); "
        f"{len(samples)} samples; stopped -> {result.stopped_status}; {result.checkpoints} checkpoints listed",
        f"per process, from the end of the warm-up ({warm.elapsed_s / 60:.1f} min, step {warm.step}) to the end "
        f"(target: growth < {GROWTH_TARGET:.0%}):",
        *growth,
        f"file growth per step (target: second half within {LINEARITY_TARGET:.0%} of the first):",
        *linear,
        f"targets: memory and fds {'met' if growth_met else 'NOT met'}; files linear in steps "
        f"{'met' if linear_met else 'NOT met'}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sample-seconds", type=float, default=60.0)
    parser.add_argument("--warmup-minutes", type=float, default=5.0)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--checkpoint-every", type=int, default=250)
    parser.add_argument("--no-report", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = parser.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="hermes-nb-soak-") as tmp:
        os.environ.update(HERMES_NB_HOME=tmp, WANDB_MODE="offline", WANDB_SILENT="true")
        result = soak(args)
    lines = report_lines(args, result, load)
    print("\n".join(lines))
    if not args.no_report:
        append_run(HEADING, INTRO, run_block(f"{args.minutes:g} minutes", lines))


if __name__ == "__main__":
    main()
