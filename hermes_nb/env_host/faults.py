"""An environment's faults during ``serve``: each is counted, logged with its item, and its group skipped.

A fault is a ``collect_trajectories`` (or ``get_next_item``) that raises, a group the trainer must not train on
(``MalformedGroup``: see ``hermes_nb.protocol.trajectory.malformed_reason``; the trajectory API's 4xx for a
group counts the same), or a call that does not return within ``env.worker_timeout`` (``CollectTimeout``).
The host ends the run after ``env.max_consecutive_failures`` of them in a row, or at the first
``errors.EnvironmentGone`` (a server the environment needs has died). A call that blocks the event
loop itself (``time.sleep``, a busy loop) cannot be cancelled by asyncio; ``LoopWatchdog`` ends the process
instead, naming where it was stuck, so the run fails rather than hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from hermes_nb.env.base import BaseEnv
from hermes_nb.env.types import Item
from hermes_nb.env_host.stats import GroupStats
from hermes_nb.env_host.trajectory_link import TrajectoryAPIError
from hermes_nb.protocol.trajectory import ScoredDataGroup, malformed_reason

logger = logging.getLogger("hermes_nb.env_host.workers")

# An item is logged with each fault; a long prompt is cut to this many characters of its repr.
ITEM_REPR_CHARS = 300
# How many of pydantic's errors one malformed-group message lists.
ERRORS_SHOWN = 3
# A blocked event loop is a hang once it has been blocked this much longer than env.worker_timeout: a GC pause or
# a large JSON dump on a busy machine stalls a loop for a second or two, never this long.
WATCHDOG_GRACE_S = 5.0
HEARTBEAT_S = 0.5


class MalformedGroup(ValueError):
    """A group the trainer must not train on; the message names the field."""


class CollectTimeout(TimeoutError):
    """``collect_trajectories`` did not return within ``env.worker_timeout``."""


async def collect(env: BaseEnv, item: Item, timeout: float) -> tuple[Any, list[Item]]:
    """``env.collect_trajectories(item)`` within ``timeout`` seconds (none when ``timeout <= 0``)."""
    name = type(env).__name__
    try:
        async with asyncio.timeout(timeout if timeout > 0 else None) as deadline:
            returned = await env.collect_trajectories(item)
    except TimeoutError:
        if not deadline.expired():
            raise  # the environment's own timeout, a fault like any exception it raises
        raise CollectTimeout(
            f"{name}.collect_trajectories did not return within {timeout:g} s (env.worker_timeout)"
        ) from None
    if not isinstance(returned, tuple | list) or len(returned) != 2:
        raise MalformedGroup(
            f"{name}.collect_trajectories returned {short_repr(returned)}; expected (group or None, backlog list)"
        )
    group, backlog = returned
    return group, list(backlog or [])


def validated_group(result: ScoredDataGroup | dict[str, Any], vocab_size: int | None) -> ScoredDataGroup:
    """``result`` as a group the trainer can train on, else ``MalformedGroup`` naming what is wrong."""
    try:
        group = result if isinstance(result, ScoredDataGroup) else ScoredDataGroup.model_validate(result)
    except ValidationError as exc:
        raise MalformedGroup(_describe_validation(exc)) from None
    problem = malformed_reason(group, vocab_size)
    if problem is not None:
        raise MalformedGroup(problem)
    return group


def _describe_validation(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    parts = []
    for error in errors[:ERRORS_SHOWN]:
        where = ""
        for part in error["loc"]:
            where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
        message = error["msg"].removeprefix("Value error, ")  # the model's own checks name their field
        parts.append(f"{where}: {message}" if where else message)
    if len(errors) > ERRORS_SHOWN:
        parts.append(f"and {len(errors) - ERRORS_SHOWN} more errors")
    return "; ".join(parts)


def short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= ITEM_REPR_CHARS else text[:ITEM_REPR_CHARS] + "..."


def report_fault(exc: BaseException, item: Item | None, stats: GroupStats) -> str:
    """Count ``exc`` in ``stats`` and log it with its item; returns its one-line description."""
    where = f"item {short_repr(item)}" if item is not None else "get_next_item"
    line = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, CollectTimeout):
        stats.record_timeout()
        logger.error("group skipped, timed out: %s (%s)", exc, where)
        return line
    stats.record_failed()
    if isinstance(exc, MalformedGroup):
        logger.error("group skipped, malformed: %s (%s)", exc, where)
    elif isinstance(exc, TrajectoryAPIError) and exc.status_code is not None and 400 <= exc.status_code < 500:
        logger.error("group skipped, refused by the trajectory API: %s (%s)", exc, where)
    else:
        logger.error("group skipped, the environment raised %s (%s)", line, where, exc_info=exc)
    return line


class LoopWatchdog:
    """Calls ``on_blocked(summary, stack)`` from a thread when the event loop has not turned for ``limit`` s.

    ``summary`` is one line naming the innermost frame, ``stack`` where the loop's thread is stuck; ``on_blocked``
    is expected to end the process.
    """

    def __init__(self, limit: float, on_blocked: Callable[[str, str], None]) -> None:
        self.limit = limit
        self.on_blocked = on_blocked
        self.beat = time.monotonic()
        self.loop_thread = threading.get_ident()
        self.done = threading.Event()
        self.heart: asyncio.Task[None] | None = None
        self.thread = threading.Thread(target=self._watch, name="env-loop-watchdog", daemon=True)

    def start(self) -> None:
        self.heart = asyncio.create_task(self._heartbeat())
        self.thread.start()

    async def stop(self) -> None:
        self.done.set()
        if self.heart is not None:
            self.heart.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.heart

    async def _heartbeat(self) -> None:
        while True:
            self.beat = time.monotonic()
            await asyncio.sleep(HEARTBEAT_S)

    def _watch(self) -> None:
        suspect: float | None = None
        while not self.done.wait(HEARTBEAT_S):
            blocked = time.monotonic() - self.beat
            if blocked <= self.limit:
                suspect = None
            elif suspect != self.beat:
                # Look once more: after the whole process was paused (SIGSTOP), this thread may wake before the
                # loop had its chance to beat.
                suspect = self.beat
            else:
                self.on_blocked(*self._describe(blocked))
                return

    def _describe(self, blocked: float) -> tuple[str, str]:
        frame = sys._current_frames().get(self.loop_thread)
        frames = traceback.extract_stack(frame) if frame is not None else traceback.StackSummary()
        summary = (
            f"the environment's event loop has been blocked for {blocked:.0f} s, longer than env.worker_timeout: "
            "code that blocks without awaiting cannot be timed out"
        )
        if frames:
            inner = frames[-1]
            summary += f"; stuck in {inner.name} at {inner.filename}:{inner.lineno}: {(inner.line or '').strip()}"
        return summary, "".join(frames.format()).rstrip()


def exit_process(summary: str, stack: str) -> None:
    """What ``LoopWatchdog`` does in an environment process: log where it is stuck, then the cause (last, where
    the run's status shows the log's tail), flush, and exit 1 at once: the loop that would run a clean shutdown
    is the thing that is stuck."""
    logger.error("the event loop is stuck here:\n%s", stack)
    logger.error("environment failed: %s", summary)
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    os._exit(1)
