"""Merging concurrent calls into one request.

An environment runs many workers, and each one asks the inference server for a group and then posts it to the
trajectory API. One HTTP request per group made the environment's HTTP client (httpx: its connection pool
scans every connection for each request) the busiest thing in the process: about half a core on the
quickstart. The workers of one wave start and finish together (a batch of completions comes back at once), so
calls issued in the same event-loop turn with the same settings are merged into one request: a multi-prompt
``/v1/completions``, or one ``/scored_data_list``. Callers still await their own result.

``Coalescer.submit`` queues a call and flushes its key on the next loop iteration, or at once when
``max_items`` are waiting. A flush returns one result per call, in order; a result that is an exception is
raised to that caller only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
A = TypeVar("A")
R = TypeVar("R")

Flush = Callable[[K, list[A]], Awaitable[list[R | BaseException]]]


class Coalescer(Generic[K, A, R]):
    def __init__(self, flush: Flush[K, A, R], *, max_items: int) -> None:
        self._flush = flush
        self._max_items = max_items
        self._pending: dict[K, list[tuple[A, asyncio.Future[R]]]] = {}
        self._running: set[asyncio.Task[None]] = set()  # strong references: the loop keeps only weak ones

    async def submit(self, key: K, argument: A) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        waiting = self._pending.setdefault(key, [])
        waiting.append((argument, future))
        if len(waiting) >= self._max_items:
            self._start(key)
        elif len(waiting) == 1:
            asyncio.get_running_loop().call_soon(self._start, key)
        return await future

    def _start(self, key: K) -> None:
        calls = self._pending.pop(key, [])
        if not calls:
            return  # flushed already because it filled up
        task = asyncio.get_running_loop().create_task(self._run(key, calls))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, key: K, calls: list[tuple[A, asyncio.Future[R]]]) -> None:
        try:
            results = await self._flush(key, [argument for argument, _ in calls])
        except asyncio.CancelledError:
            for _, future in calls:
                future.cancel()
            raise
        except Exception as exc:  # the request as a whole failed: every caller in it sees why
            for _, future in calls:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(calls, results, strict=True):
            if future.done():
                continue  # the caller was cancelled; its share of the request is simply dropped
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
