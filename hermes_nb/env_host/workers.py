"""The groups in flight during ``serve``: how many the API's queue has room for (back-pressure), each worker's
item -> group -> ``POST /scored_data`` (backlog items first), and the faults workers end with.

A worker's fault (it raised, its group is malformed, it timed out) skips that group; ``hermes_nb.env_host.faults``
says how each is counted. The run ends for them after ``env.max_consecutive_failures`` in a row, or at once for
``EnvironmentGone``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

from hermes_nb.env.base import BaseEnv
from hermes_nb.env.inference_client import InferenceError
from hermes_nb.env.types import Item
from hermes_nb.env_host import faults
from hermes_nb.env_host.registration import RunProgress
from hermes_nb.env_host.step_metrics import StepMetrics
from hermes_nb.env_host.trajectory_link import TrajectoryLink
from hermes_nb.errors import EnvironmentGone
from hermes_nb.protocol.trajectory import ScoredDataGroup, scores_carry_signal

logger = logging.getLogger(__name__)


class Workers:
    """Each worker's task and item, the backlog its environment handed back, and what they posted or failed."""

    def __init__(
        self, env: BaseEnv, link: TrajectoryLink, progress: RunProgress, metrics: StepMetrics, stop: asyncio.Event
    ):
        self.env = env
        self.config = env.config
        self.link = link
        self.progress = progress
        self.metrics = metrics
        self.stop = stop
        self.backlog: list[Item] = []
        self.tasks: dict[asyncio.Task[None], Item] = {}  # each worker's item, to log with its fault
        self.done = asyncio.Event()  # set by each finishing worker: refill at once, not at the next poll
        self.groups_posted = 0
        self.consecutive_failures = 0
        self.last_error = ""

    def budget(self) -> int:
        """Groups that may be in flight now: none while the API's queue holds ``max_batches_offpolicy`` batches
        of sequences or already holds everything the remaining steps need; else what fills that room. The
        API's cap (``queue_room``) bounds it too: every group in flight must fit when it is posted."""
        run, group_size = self.progress, self.config.group_size
        queued_seqs = run.queue_groups * group_size  # the API's queue_size counts groups, as in atroposlib
        room_seqs = self.config.max_batches_offpolicy * run.batch_size - queued_seqs
        needed_seqs = (run.total_steps - run.step) * run.batch_size - queued_seqs
        if room_seqs <= 0 or needed_seqs <= 0:
            return 0
        budget = min(self.config.max_num_workers, math.ceil(room_seqs / group_size))
        if run.queue_room is not None:
            budget = min(budget, run.queue_room // group_size)
        return budget

    async def fill(self) -> None:
        budget = self.budget()
        while len(self.tasks) < budget and not self.stop.is_set():
            item = await self.next_item()
            if item is None:
                return
            task = asyncio.create_task(self.work(item))
            task.add_done_callback(lambda _: self.done.set())
            self.tasks[task] = item

    async def next_item(self) -> Item | None:
        if self.backlog:
            return self.backlog.pop(0)
        try:
            return await self.env.get_next_item()
        except Exception as exc:
            self.count_failure(exc, None)
            return None

    async def work(self, item: Item) -> None:
        started = time.monotonic()
        result, backlog = await faults.collect(self.env, item, self.config.worker_timeout)
        self.backlog.extend(backlog)
        group = self.checked(result)
        if group is not None:
            self.metrics.stats.record_scored(group.scores, group.verdicts())
        if group is None or not self.worth_sending(group):
            self.metrics.stats.record_skipped(time.monotonic() - started)
            self.metrics.peek_soon(self.progress.step)
            return
        await self.link.post_group(group)
        self.groups_posted += 1
        self.progress.queue_groups += 1  # until the next /status-env says otherwise: the budget must not overshoot
        if self.progress.queue_room is not None:
            self.progress.queue_room = max(0, self.progress.queue_room - group.group_size)
        self.metrics.stats.record_posted(group, time.monotonic() - started)
        self.metrics.peek_soon(self.progress.step)

    def checked(self, result: ScoredDataGroup | dict[str, Any] | None) -> ScoredDataGroup | None:
        """The environment's group, validated (``None``: it skipped the item); ``faults.MalformedGroup`` when the
        trainer must not train on it."""
        if result is None:
            return None
        group = faults.validated_group(result, self.progress.vocab_size)
        text_only_answers: int = getattr(self.env.server, "text_only_answers", 0)
        if group.is_test_only() or text_only_answers:
            # Its token ids were re-made from an endpoint's text: the worker fails, loudly, rather than train on it.
            raise InferenceError(
                "the inference server answered with text only (no token ids): such groups are for "
                "rl_test_inference, a training run needs a server that returns the sampled token ids"
            )
        return group

    def worth_sending(self, group: ScoredDataGroup) -> bool:
        """False to skip a checked group: nothing to learn from, or too long for the trainer."""
        if self.config.ensure_scores_are_not_same and not scores_carry_signal(group.scores):
            return False
        max_token_len = self.progress.max_token_len
        overlong = group.overlong_sequence(max_token_len)
        if overlong is not None:
            logger.warning("skipping a group: a sequence has %d tokens, the trainer takes %d", overlong[1],
                           max_token_len)  # fmt: skip
            return False
        return True

    def reap(self) -> str | None:
        """Collect finished workers; a failed one is counted, logged with its item, and its group skipped. The
        run's error when it must end: a worker failed with ``EnvironmentGone`` (no later group could succeed),
        or too many failed in a row."""
        for task in [t for t in self.tasks if t.done()]:
            item = self.tasks.pop(task)
            if task.cancelled():
                continue
            exc = task.exception()
            if exc is None:
                self.consecutive_failures = 0
                continue
            self.count_failure(exc, item)
            if isinstance(exc, EnvironmentGone):
                return f"{type(self.env).__name__}: {exc}"
            if self.consecutive_failures >= self.config.max_consecutive_failures:
                break
        return self.streak_failure()

    def streak_failure(self) -> str | None:
        """The run's error when ``env.max_consecutive_failures`` groups in a row failed, naming the last one."""
        limit = self.config.max_consecutive_failures
        if self.consecutive_failures < limit:
            return None
        return (
            f"{type(self.env).__name__}: {self.consecutive_failures} groups failed in a row (last: "
            f"{self.last_error}); the environment or the inference server is broken "
            f"(env.max_consecutive_failures = {limit}; the log above has each group's error)"
        )

    def count_failure(self, exc: BaseException, item: Item | None) -> None:
        self.consecutive_failures += 1
        self.last_error = faults.report_fault(exc, item, self.metrics.stats)
        self.metrics.log_faults_soon(self.progress.step)

    async def cancel(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()
