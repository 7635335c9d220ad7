"""What a run costs, measured by its supervisor: CPU-seconds and peak memory of each process tree, sampled while
the run lives, with wall time by phase and tokens from the metrics, written to ``cost.json``
(``hermes_nb.protocol.health.RunCost``)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import psutil

from hermes_nb.metrics.reader import read_metrics_file
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.health import CostFigures, ProcessCost, RunCost, read_cost, write_cost
from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.protocol.run_state import ProcessRecord, RunState

# cost.json is rewritten this often while the run lives: status shows a live run's cost without a file per second.
WRITE_EVERY_S = 5.0


def _tree_usage(pid: int) -> tuple[float, int]:
    """CPU-seconds and resident bytes of a process and its live descendants (reaped children's CPU included)."""
    cpu, rss = 0.0, 0
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return cpu, rss
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            cpu += times.user + times.system + times.children_user + times.children_system
            rss += proc.memory_info().rss
    return cpu, rss


@dataclass
class CostMeter:
    """The largest figures seen of each process: a tree's CPU only grows, and a descendant that ended took its
    seconds with it, so the largest sample is the closest to the truth."""

    processes: dict[str, ProcessCost] = field(default_factory=dict)
    last_write: float = 0.0
    # What the run was expected to cost (``runs.estimate.estimated_cost``), written beside the actual figures.
    estimate: CostFigures | None = None

    def sample(self, records: dict[str, ProcessRecord]) -> None:
        for name, record in records.items():
            cpu, rss = _tree_usage(record.pid)
            seen = self.processes.get(name, ProcessCost())
            self.processes[name] = ProcessCost(
                cpu_seconds=max(seen.cpu_seconds, cpu), peak_rss_bytes=max(seen.peak_rss_bytes, rss)
            )

    def write_soon(self, paths: RunPaths, state: RunState, group_size: int) -> None:
        if time.monotonic() - self.last_write >= WRITE_EVERY_S:
            self.write(paths, state, group_size, final=False)

    def write(self, paths: RunPaths, state: RunState, group_size: int, *, final: bool) -> None:
        """``cost.json`` with the figures so far, and the estimate beside them once there is one (this meter's, or
        one already recorded there)."""
        self.last_write = time.monotonic()
        earlier = read_cost(paths.cost)
        estimate = self.estimate or (earlier.estimate if earlier else None)
        actual = run_figures(paths, state, self.processes, group_size)
        write_cost(paths.cost, RunCost(actual=actual, estimate=estimate, final=final))


def wall_phases(state: RunState) -> dict[str, float]:
    """Seconds from the start call to every process running ("start"), and from then to the end ("train")."""
    if state.started_at is None:
        return {"start": (state.ended_at or time.time()) - state.created_at}
    return {"start": state.started_at - state.created_at, "train": (state.ended_at or time.time()) - state.started_at}


def token_totals(paths: RunPaths, group_size: int) -> tuple[int, int]:
    """Tokens sampled (completions of the groups the environment posted, by its per-row mean) and trained."""
    trained = sum(r.values.get(keys.TRAIN_TRAINED_TOKENS, 0.0) for r in read_metrics_file(paths.metrics).rows)
    sampled = sum(
        r.values.get(keys.ENV_COMPLETION_TOKENS_MEAN, 0.0) * r.values.get(keys.ENV_GROUPS_POSTED, 0.0) * group_size
        for r in read_metrics_file(paths.env_metrics).rows
    )
    return int(sampled), int(trained)


def run_figures(paths: RunPaths, state: RunState, processes: dict[str, ProcessCost], group_size: int) -> CostFigures:
    sampled, trained = token_totals(paths, group_size)
    return CostFigures(
        wall_seconds=wall_phases(state),
        processes=dict(processes),
        tokens_sampled=sampled,
        tokens_trained=trained,
    )
