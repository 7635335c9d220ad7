"""The environment's metric rows: what ``GroupStats`` counted since the last row, the environment's own
``wandb_log`` values and its evaluations, to the log and to ``env_metrics.jsonl`` (mirrored to W&B)."""

from __future__ import annotations

import logging
import time

from hermes_nb.env.base import BaseEnv
from hermes_nb.env_host.stats import GroupStats
from hermes_nb.metrics.logger import MetricsLogger
from hermes_nb.protocol.metrics import ENV_QUEUE_SIZE

logger = logging.getLogger(__name__)

# Fault rows (env/failed_groups, env/timeouts) go out at once, but no more often than this.
FAULT_ROW_S = 1.0
# The health checks see the groups counted so far at most this often between rows: a run whose every group is
# dropped takes no step, so without a look between steps it would never be told (``hermes_nb.health``).
HEALTH_PEEK_S = 1.0


class StepMetrics:
    """Counts (``stats``, replaced at each train row) and the rows made of them; no logger: the log only."""

    def __init__(self, env: BaseEnv, metrics: MetricsLogger | None):
        self.env = env
        self.metrics = metrics
        self.stats = GroupStats()
        self.last_fault_row = 0.0
        self.last_peek = 0.0

    def log(self, step: int, values: dict[str, float]) -> None:
        logger.info("step %d: %s", step, ", ".join(f"{k}={v:.4g}" for k, v in sorted(values.items())))
        if self.metrics is not None:
            self.metrics.log(step, values)

    async def log_train_row(self, step: int, queue_groups: int) -> None:
        """What was collected since the last row, with the environment's own values and the API's queue."""
        stats, self.stats = self.stats, GroupStats()
        stats.record_scored(*self.env.take_dropped())
        try:
            env_values = await self.env.wandb_log({})
        except Exception:
            logger.exception("%s.wandb_log failed; its metrics are skipped this step", type(self.env).__name__)
            env_values = {}
        if stats.empty and not env_values:
            return
        self.log(step, {**env_values, **stats.row(), ENV_QUEUE_SIZE: float(queue_groups)})

    def log_faults_soon(self, step: int) -> None:
        """The fault counts as a row now, unless one went out less than ``FAULT_ROW_S`` ago."""
        now = time.monotonic()
        if now - self.last_fault_row >= FAULT_ROW_S:
            self.last_fault_row = now
            self.log(step, self.stats.take_faults())

    def peek_soon(self, step: int) -> None:
        """Show the health checks the groups counted since the last row, unless they saw them under
        ``HEALTH_PEEK_S`` ago."""
        now = time.monotonic()
        if self.metrics is not None and now - self.last_peek >= HEALTH_PEEK_S:
            self.last_peek = now
            self.metrics.peek(step, self.stats.row())

    def write_faults_now(self, step: int) -> None:
        """The fault counts straight to the file, without the log: from the watchdog's thread, as the process
        ends."""
        if self.metrics is not None:
            self.metrics.log(step, self.stats.take_faults())
