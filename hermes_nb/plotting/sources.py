"""Where the live plot gets its rows: a run's metrics files, or a W&B run through the public API.

A source returns only rows it has not returned before (``poll``) and says whether its run has ended
(``finished``). The plot thread calls ``finished`` *before* ``poll``: a run that was over before the poll had
written all its rows, so the last frame drawn is complete.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from hermes_nb.errors import HermesNBError, UnknownRunError
from hermes_nb.metrics.reader import read_metrics
from hermes_nb.plotting.panels import PLOTTED_KEYS
from hermes_nb.protocol.health import read_findings
from hermes_nb.protocol.metrics import TRAINER_ONLY_KEYS, WANDB_STEP_KEY, MetricsRow
from hermes_nb.protocol.run_files import ENV_METRICS_FILE, HEALTH_FILE, RUN_STATE_FILE, TRAINER_METRICS_FILE
from hermes_nb.runs.supervision.damage import Damage, file_damage, read_state
from hermes_nb.runs.transfer.lineage import predecessor_rows
from hermes_nb.system import home
from hermes_nb.system.home import run_paths

logger = logging.getLogger(__name__)

# The W&B public API is rate limited per key (a few hundred requests a minute shared by everything the user
# runs), and a training step takes seconds: asking more often than this gains nothing.
WANDB_MIN_POLL_INTERVAL_S = 10.0
# W&B states after which no more rows will come.
WANDB_FINISHED_STATES = frozenset({"finished", "failed", "crashed", "killed"})


class MetricsSource(Protocol):
    label: str

    def finished(self) -> bool: ...

    def poll(self) -> list[MetricsRow]: ...

    def health_steps(self) -> list[int]:
        """The steps where the run's health findings began (``hermes_nb.health``), marked on the plot."""
        ...


class RunFilesSource:
    """A local run: ``metrics.jsonl`` and ``env_metrics.jsonl`` read from the byte where the last poll stopped."""

    def __init__(self, run_id: str, label: str | None = None) -> None:
        """``label``: the legend's name for the run (the runs table passes what differs, ``lr=3e-4``); its id else."""
        self.run_id = run_id
        self.label = label or run_id
        self.run_dir = home.run_dir(run_id)
        if not self.run_dir.is_dir():
            raise UnknownRunError(f"run {run_id!r} not found in {home.runs_dir()} (see %rl_runs)")
        self._offsets = {TRAINER_METRICS_FILE: 0, ENV_METRICS_FILE: 0}
        # A resumed run's curve continues the one it resumed from: those rows come with the first poll.
        self._earlier = {name: predecessor_rows(run_id, name) for name in self._offsets}
        # What is wrong with the run's files, once it has ended and a poll has looked (None: not looked yet).
        self.damaged: list[Damage] | None = None

    def finished(self) -> bool:
        if not (self.run_dir / RUN_STATE_FILE).is_file():
            return False  # not written yet: the run is still starting
        # A run.json that cannot be read is shown from the run's other files (hermes_nb.runs.supervision.damage).
        return read_state(run_paths(self.run_id))[0].is_terminal

    def health_steps(self) -> list[int]:
        return sorted({finding.step for finding in read_findings(self.run_dir / HEALTH_FILE)})

    def poll(self) -> list[MetricsRow]:
        earlier, self._earlier = self._earlier, {}
        new: dict[str, list[MetricsRow]] = {}
        for name, offset in self._offsets.items():
            rows, self._offsets[name] = read_metrics(self.run_dir / name, offset)
            new[name] = earlier.get(name, []) + rows
        # Each plotted key is one file's: train/* the trainer's (the trained batch), eval/* the environment's.
        env_rows = [without_keys(row, TRAINER_ONLY_KEYS) for row in new[ENV_METRICS_FILE]]
        self._say_damage()
        return new[TRAINER_METRICS_FILE] + env_rows

    def _say_damage(self) -> None:
        """Once the run has ended, log (once) what is wrong with its files: the plot shows what could be read."""
        if self.damaged is not None or not (self.run_dir / RUN_STATE_FILE).is_file():
            return
        paths = run_paths(self.run_id)
        state, damaged = read_state(paths)
        if not state.is_terminal:
            return
        self.damaged = damaged + file_damage(paths, ended=True)
        for damage in self.damaged:
            logger.warning("run %s: damaged: %s", self.run_id, damage)


def without_keys(row: MetricsRow, keys: frozenset[str]) -> MetricsRow:
    """``row`` less ``keys``: an older run's environment row less the trainer's keys (see TRAINER_ONLY_KEYS)."""
    if not keys & row.values.keys():
        return row
    return row.model_copy(update={"values": {k: v for k, v in row.values.items() if k not in keys}})


class WandbHistoryClient(Protocol):
    """The two calls made to W&B; ``PublicApiClient`` is the real one, tests pass a fake of the service."""

    def state(self, path: str) -> str: ...

    def history(self, path: str, keys: list[str], min_step: int) -> Iterable[dict[str, Any]]: ...


class PublicApiClient:
    """``wandb.Api``: the key comes from ``WANDB_API_KEY`` (read by wandb itself, never passed here)."""

    def __init__(self) -> None:
        try:
            import wandb
        except ImportError:  # pragma: no cover - wandb is a dependency
            raise HermesNBError("watching a W&B run needs wandb: pip install wandb") from None
        self._api = wandb.Api(timeout=30)

    def state(self, path: str) -> str:
        return str(self._api.run(path).state)

    def history(self, path: str, keys: list[str], min_step: int) -> Iterator[dict[str, Any]]:
        # No keys filter: scan_history(keys=...) drops a row unless it has *every* key, and the trainer and the
        # environment log different keys at different steps.
        return iter(self._api.run(path).scan_history(min_step=min_step, page_size=1000))


class WandbRunSource:
    """An online W&B run ``entity/project/run_id``, read incrementally (``min_step``) and rate limited."""

    def __init__(
        self,
        path: str,
        client: WandbHistoryClient | None = None,
        min_interval_s: float = WANDB_MIN_POLL_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if path.count("/") != 2 or not all(path.split("/")):
            raise HermesNBError(f"W&B run path {path!r} must be entity/project/run_id")
        self.label = path
        self._path = path
        self._client = client or PublicApiClient()
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._next_step = 0
        self._last_poll: float | None = None
        self._last_state_check: float | None = None
        self._state = "running"

    def finished(self) -> bool:
        if not self._due(self._last_state_check):
            return self._state in WANDB_FINISHED_STATES
        self._last_state_check = self._clock()
        self._state = self._client.state(self._path)
        return self._state in WANDB_FINISHED_STATES

    def health_steps(self) -> list[int]:
        return []  # health findings live in the run directory, which a W&B run is read without

    def poll(self) -> list[MetricsRow]:
        # The final poll after the run ended must not be skipped, or the last rows would be missing.
        if not self._due(self._last_poll) and self._state not in WANDB_FINISHED_STATES:
            return []
        self._last_poll = self._clock()
        rows = [
            row
            for item in self._client.history(self._path, list(PLOTTED_KEYS), self._next_step)
            if (row := _row_from_history(item)) is not None
        ]
        if rows:
            self._next_step = max(row.step for row in rows) + 1
        return rows

    def _due(self, last: float | None) -> bool:
        return last is None or self._clock() - last >= self._min_interval_s


def _row_from_history(item: dict[str, Any]) -> MetricsRow | None:
    # hermes-nb logs its own x-axis (the trainer step) next to W&B's internal _step; prefer it.
    raw_step = item.get(WANDB_STEP_KEY, item.get("_step"))
    if not isinstance(raw_step, int | float):
        return None
    step = int(raw_step)
    values = {k: float(v) for k, v in item.items() if k in PLOTTED_KEYS and isinstance(v, int | float)}
    return MetricsRow(step=step, time=float(item.get("_timestamp") or 0.0), values=values)


def source_for(ref: str) -> MetricsSource:
    """A run id (local files) or an ``entity/project/run_id`` W&B path."""
    return WandbRunSource(ref) if "/" in ref else RunFilesSource(ref)
