"""``MetricsLogger``: one ``MetricsRow`` per call to a JSONL file, and the same keys to W&B in the background.

The JSONL file is the record that status and the live plot read, so it is written synchronously, one whole row
per write (``hermes_nb.system.disk.RecordFile``): a row that does not fit on a full disk raises
``DiskFullError`` and leaves no half line, so the file stays readable and appendable once space is back.
W&B is a mirror: ``wandb.init`` starts a service process and can take seconds, an online run can stall on the
network, and either can fail. All of that happens in a child process at a lower priority
(``hermes_nb.metrics.wandb_mirror``: why a process and not a thread), fed from a queue by one thread, so
training never waits on W&B, W&B's Python never holds the GIL of the process that trains or samples, and a W&B
failure is logged once while the JSONL keeps going.

Keys reach W&B only through ``WANDB_API_KEY`` in the environment (wandb reads it itself); nothing here passes
a key anywhere.
"""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from hermes_nb.health import HealthWatch
from hermes_nb.metrics import wandb_mirror
from hermes_nb.metrics.reader import read_all_metrics, read_metrics
from hermes_nb.metrics.wandb_settings import (
    ResolvedWandbMode,
    WandbRunSettings,
    resolve_wandb_mode,
    wandb_info_path,
)
from hermes_nb.protocol.metrics import MetricsRow
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

# Rows queued while wandb.init is still starting (or W&B is slow). A step's row is a few hundred bytes, so
# this bounds memory at tens of MB; beyond it W&B misses rows, the JSONL does not.
MAX_QUEUED_ROWS = 100_000
# How long close() waits for the W&B mirror to flush and finish before ending it.
DEFAULT_CLOSE_TIMEOUT_S = 30.0

_STOP = object()


class MetricsLogger:
    """Append rows to ``jsonl_path`` (flushed at once) and mirror them to W&B when ``wandb`` is given."""

    def __init__(
        self, jsonl_path: str | Path, *, wandb: WandbRunSettings | None = None, health: HealthWatch | None = None
    ) -> None:
        self.jsonl_path = Path(jsonl_path)
        # The run's health checks of this file, evaluated on each row as written (``hermes_nb.health``).
        self.health = health
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
        if self.health is not None:
            self.health.observe(row.step, _numbers(values))
        return row

    def peek(self, step: int, values: dict[str, float]) -> None:
        """Let the health checks see figures still being counted, without writing a row."""
        if self.health is not None:
            self.health.peek(step, _numbers(values))

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


def _numbers(values: dict[str, Any]) -> dict[str, float]:
    """The values that are numbers, non-finite ones kept (the health checks look for them)."""
    found = {}
    for key, value in values.items():
        with contextlib.suppress(TypeError, ValueError):
            found[key] = float(value)
    return found


def _is_finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


class _WandbSink:
    """Feeds the W&B mirror process (``hermes_nb.metrics.wandb_mirror``): the settings, then one row per line.

    One writer thread drains a queue into the mirror's stdin, so ``log`` never waits on a pipe the mirror has not
    read yet (it may still be starting W&B, at its lower priority)."""

    def __init__(self, settings: WandbRunSettings) -> None:
        self.settings = settings
        self._broken = False
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=MAX_QUEUED_ROWS)
        self._queue.put_nowait(settings.model_dump_json() + "\n")
        self._process: subprocess.Popen[str] | None = None
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", wandb_mirror.__name__],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,  # stderr stays the parent's: the mirror's one warning lands in its log
                text=True,
                encoding="utf-8",
            )
        except OSError as exc:  # no process to spare (EAGAIN, ENOMEM): W&B is off, the JSONL and training are not
            logger.warning(
                "W&B (%s) could not start its mirror: %s; metrics continue in the JSONL file", settings.role, exc
            )
            self._broken = True
            return
        self._thread = threading.Thread(
            target=self._feed, args=(self._process,), name=f"wandb-{settings.role}", daemon=True
        )
        self._thread.start()

    @property
    def failed(self) -> bool:
        if self._broken or self._process is None:
            return True
        code = self._process.poll()
        return code is not None and code != 0

    def submit(self, row: MetricsRow) -> None:
        if self._broken:
            return
        # When full, W&B is far behind; the JSONL row is already written.
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(row.to_json_line())

    def close(self, timeout: float) -> None:
        if self._process is None:
            return
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=timeout)
        deadline = time.monotonic() + timeout
        self._thread.join(timeout)
        try:
            self._process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            logger.warning("W&B (%s) did not finish within %.0f s; ending its mirror", self.settings.role, timeout)
            self._process.kill()
            self._process.wait()

    def _feed(self, process: subprocess.Popen[str]) -> None:
        pipe = process.stdin
        assert pipe is not None
        try:
            while (item := self._queue.get()) is not _STOP:
                pipe.write(item)
                pipe.flush()
        except OSError:  # the mirror ended early (its warning is in the log): drop what is left
            self._broken = True
            _drain(self._queue)
        finally:
            with contextlib.suppress(OSError):
                pipe.close()


def _drain(q: queue.Queue[Any]) -> None:
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            return
