"""What a run costs, measured by its supervisor: CPU-seconds and peak memory of each process tree, sampled while
the run lives, with wall time by phase, tokens, and the trainer's GPU-seconds and peak GPU memory from the metrics
(what the trainer read with torch's CUDA API: absent on a CPU), and money where a price applies (the user's
``prices.yaml`` entry for a Tinker run), written to ``cost.json`` (``hermes_nb.protocol.health.RunCost``)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import psutil

from hermes_nb.metrics.reader import read_metrics_file
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.health import CostFigures, ProcessCost, RunCost, read_cost, write_cost
from hermes_nb.protocol.metrics import MetricsRow
from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.protocol.run_state import ProcessRecord, RunState
from hermes_nb.runs.prices import Price

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
    # The user's price of the run's model (``runs.prices.run_price``); None: no price applies or none is known.
    price: Price | None = None

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
        actual = run_figures(paths, state, self.processes, group_size, self.price)
        write_cost(paths.cost, RunCost(actual=actual, estimate=estimate, final=final))


def wall_phases(state: RunState) -> dict[str, float]:
    """Seconds from the start call to every process running ("start"), and from then to the end ("train")."""
    if state.started_at is None:
        return {"start": (state.ended_at or time.time()) - state.created_at}
    return {"start": state.started_at - state.created_at, "train": (state.ended_at or time.time()) - state.started_at}


def token_totals(trainer_rows: list[MetricsRow], env_rows: list[MetricsRow], group_size: int) -> tuple[int, int]:
    """Tokens sampled (completions of the groups the environment posted, by its per-row mean) and trained."""
    trained = sum(r.values.get(keys.TRAIN_TRAINED_TOKENS, 0.0) for r in trainer_rows)
    sampled = sum(
        r.values.get(keys.ENV_COMPLETION_TOKENS_MEAN, 0.0) * r.values.get(keys.ENV_GROUPS_POSTED, 0.0) * group_size
        for r in env_rows
    )
    return int(sampled), int(trained)


def newest_with(rows: list[MetricsRow], key: str) -> dict[str, float] | None:
    """The values of the newest row that has ``key`` (a process's running total): None where none has it."""
    return next((r.values for r in reversed(rows) if key in r.values), None)


def judge_totals(env_rows: list[MetricsRow]) -> tuple[int | None, int | None]:
    """The judge's calls and tokens: running totals of the environment process, so the newest row's; None where
    the environment asked no judge."""
    newest = newest_with(env_rows, keys.JUDGE_CALLS)
    if newest is None:
        return None, None
    tokens = newest.get(keys.JUDGE_PROMPT_TOKENS, 0.0) + newest.get(keys.JUDGE_COMPLETION_TOKENS, 0.0)
    return int(newest[keys.JUDGE_CALLS]), int(tokens)


def trainer_gpu(trainer_rows: list[MetricsRow], trainer: ProcessCost) -> ProcessCost:
    """The trainer's figures with its GPU-seconds and peak GPU memory, as its newest row that has them says (both
    are running totals of the process); left absent where no row has them (a CPU run)."""
    newest = newest_with(trainer_rows, keys.TRAIN_GPU_SECONDS)
    if newest is None:
        return trainer
    peak = newest.get(keys.TRAIN_GPU_PEAK_BYTES)
    return trainer.model_copy(
        update={"gpu_seconds": newest[keys.TRAIN_GPU_SECONDS], "gpu_peak_bytes": None if peak is None else int(peak)}
    )


def run_figures(
    paths: RunPaths,
    state: RunState,
    processes: dict[str, ProcessCost],
    group_size: int,
    price: Price | None = None,
) -> CostFigures:
    trainer_rows, env_rows = read_metrics_file(paths.metrics).rows, read_metrics_file(paths.env_metrics).rows
    sampled, trained = token_totals(trainer_rows, env_rows, group_size)
    judge_calls, judge_tokens = judge_totals(env_rows)
    figures = dict(processes)
    if "trainer" in figures:
        figures["trainer"] = trainer_gpu(trainer_rows, figures["trainer"])
    return CostFigures(
        wall_seconds=wall_phases(state),
        processes=figures,
        tokens_sampled=sampled,
        tokens_trained=trained,
        price_usd=None if price is None else price.dollars(sampled=sampled, trained=trained),
        judge_calls=judge_calls,
        judge_tokens=judge_tokens,
    )
