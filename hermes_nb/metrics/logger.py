"""``MetricsLogger``: one ``MetricsRow`` per call to a JSONL file, and the same keys to W&B in the background.

The JSONL file is the record that status and the live plot read, so it is written synchronously, one whole row
per write (``hermes_nb.system.disk.RecordFile``): a row that does not fit on a full disk raises
``DiskFullError`` and leaves no half line, so the file stays readable and appendable once space is back.
W&B is a mirror: ``wandb.init`` starts a service process and can take seconds, an online run can stall on the
network, and either can fail. All of that happens on one background thread fed by a queue, so
training never waits on W&B and a W&B failure is logged once while the JSONL keeps going.

Keys reach W&B only through ``WANDB_API_KEY`` in the environment (wandb reads it itself); nothing here passes
a key anywhere.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import queue
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hermes_nb.config import WandbConfig
from hermes_nb.metrics.reader import read_all_metrics, read_metrics
from hermes_nb.protocol.metrics import WANDB_STEP_KEY, MetricsRow
from hermes_nb.system.disk import RecordFile

logger = logging.getLogger(__name__)

__all__ = [
    "MetricsLogger",
    "ResolvedWandbMode",
    "WandbRunSettings",
    "read_all_metrics",
    "read_metrics",
    "resolve_wandb_mode",
    "wandb_info_path",
]

ResolvedWandbMode = Literal["online", "offline", "disabled"]

# Rows queued while wandb.init is still starting (or W&B is slow). A step's row is a few hundred bytes, so
# this bounds memory at tens of MB; beyond it W&B misses rows, the JSONL does not.
MAX_QUEUED_ROWS = 100_000
# How long close() waits for the W&B thread to flush and finish before leaving it (a daemon) behind.
DEFAULT_CLOSE_TIMEOUT_S = 30.0

_STOP = object()


class WandbRunSettings(BaseModel):
    """What ``wandb.init`` gets. ``dir`` is the run directory: W&B's own files go to ``<dir>/wandb/``."""

    model_config = ConfigDict(extra="forbid")

    project: str = WandbConfig.model_fields["project"].default
    name: str | None = None
    group: str | None = None
    mode: ResolvedWandbMode = "offline"
    dir: Path
    entity: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    # Which process of the run logs ("trainer", "env"): the W&B job type and the name of wandb_<role>.json.
    role: str = "trainer"


def resolve_wandb_mode(config_mode: str) -> ResolvedWandbMode:
    """``auto`` = online when ``WANDB_API_KEY`` is set, else offline (an explicit ``WANDB_MODE`` of offline or
    disabled in the environment wins, so tests and air-gapped machines stay off the network)."""
    if config_mode in ("online", "offline", "disabled"):
        return config_mode  # type: ignore[return-value]
    if config_mode != "auto":
        raise ValueError(f"wandb.mode: {config_mode!r} is not one of auto, online, offline, disabled")
    env_mode = os.environ.get("WANDB_MODE", "").strip().lower()
    if env_mode in ("offline", "dryrun"):
        return "offline"
    if env_mode == "disabled":
        return "disabled"
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


def wandb_info_path(run_dir: str | Path, role: str) -> Path:
    """Where the W&B run's id, name and URL are recorded for status to find."""
    return Path(run_dir) / f"wandb_{role}.json"


class MetricsLogger:
    """Append rows to ``jsonl_path`` (flushed at once) and mirror them to W&B when ``wandb`` is given."""

    def __init__(self, jsonl_path: str | Path, *, wandb: WandbRunSettings | None = None) -> None:
        self.jsonl_path = Path(jsonl_path)
        self.jsonl_path.parent.mkdir(parents=True, exist_ok=True)
        self._file = RecordFile(self.jsonl_path)
        self._lock = threading.Lock()
        self._sink = _WandbSink(wandb) if wandb is not None and wandb.mode != "disabled" else None

    def log(self, step: int, values: dict[str, float]) -> MetricsRow:
        """Write one row for trainer step ``step``. Non-finite values are dropped: JSON has no NaN.

        Raises ``DiskFullError`` (the file as it was) when the row does not fit."""
        clean = {key: float(v) for key, v in values.items() if _is_finite(v)}
        row = MetricsRow(step=int(step), time=time.time(), values=clean)
        with self._lock:
            if self._file.closed:
                raise RuntimeError(f"MetricsLogger for {self.jsonl_path} is closed")
            self._file.append(row.to_json_line().encode("utf-8"))
        if self._sink is not None:
            self._sink.submit(row)
        return row

    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:
        """Close the file and let W&B flush for up to ``timeout`` seconds. Safe to call twice."""
        with self._lock:
            self._file.close()
        if self._sink is not None:
            self._sink.close(timeout)

    @property
    def wandb_failed(self) -> bool:
        return self._sink is not None and self._sink.failed

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _is_finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


class _WandbSink:
    """The background thread that owns the W&B run: init, log queued rows in order, finish."""

    def __init__(self, settings: WandbRunSettings) -> None:
        self.settings = settings
        self.failed = False
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=MAX_QUEUED_ROWS)
        self._thread = threading.Thread(target=self._run, name=f"wandb-{settings.role}", daemon=True)
        self._thread.start()

    def submit(self, row: MetricsRow) -> None:
        if self.failed:
            return
        # When full, W&B is far behind; the JSONL row is already written.
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(row)

    def close(self, timeout: float) -> None:
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("W&B (%s) did not finish within %.0f s; leaving it behind", self.settings.role, timeout)

    def _run(self) -> None:
        try:
            run = self._init()
        except Exception as exc:  # any W&B failure must stay on this thread
            self._fail("could not start", exc)
            _drain(self._queue)  # nobody reads the queue any more; free the rows
            return
        try:
            self._pump(run)
        finally:
            self._finish(run)

    def _init(self) -> Any:
        import wandb

        s = self.settings
        s.dir.mkdir(parents=True, exist_ok=True)
        run = wandb.init(
            project=s.project,
            name=s.name,
            group=s.group,
            entity=s.entity,
            config=s.config,
            mode=s.mode,
            dir=str(s.dir),
            job_type=s.role,
            # Several runs may live in one process (a notebook kernel, tests); each logger owns its own.
            reinit="create_new",
            # Capturing stdout from a background thread would interleave with the process's own logs.
            settings=wandb.Settings(console="off", silent=True),
        )
        # The x-axis is the trainer step carried as a value, not W&B's own step: W&B drops rows whose step goes
        # backwards, and an evaluation started at step s may finish after rows for s+1 were logged.
        run.define_metric(WANDB_STEP_KEY)
        run.define_metric("*", step_metric=WANDB_STEP_KEY)
        _write_info(s, run)
        return run

    def _pump(self, run: Any) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if self.failed:
                continue
            try:
                run.log({**item.values, WANDB_STEP_KEY: item.step})
            except Exception as exc:
                self._fail("stopped logging", exc)

    def _finish(self, run: Any) -> None:
        try:
            run.finish()
        except Exception as exc:
            self._fail("could not finish", exc)

    def _fail(self, what: str, exc: BaseException) -> None:
        if not self.failed:
            logger.warning(
                "W&B (%s, %s mode) %s: %s: %s; metrics continue in the JSONL file",
                self.settings.role, self.settings.mode, what, type(exc).__name__, exc,
            )  # fmt: skip
        self.failed = True


def _drain(q: queue.Queue[Any]) -> None:
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            return


def _write_info(settings: WandbRunSettings, run: Any) -> None:
    """Record the run's identity atomically so that a status reader never sees half a file."""
    info = {
        "role": settings.role,
        "mode": settings.mode,
        "project": settings.project,
        "entity": getattr(run, "entity", None) or settings.entity,
        "id": getattr(run, "id", None),
        "name": getattr(run, "name", None),
        "url": getattr(run, "url", None) if settings.mode == "online" else None,
        "dir": str(getattr(run, "dir", "") or ""),
    }
    path = wandb_info_path(settings.dir, settings.role)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(info, indent=1), encoding="utf-8")
    tmp.replace(path)
