"""How many OpenEnv sessions a run holds at once: as many as its workers ask for, within the server's capacity.

A run's workers open ``group_size`` sessions per group, ``max_num_workers`` groups at a time. An OpenEnv server
holds at most its ``max_concurrent_envs`` sessions and says so only by refusing one more (``CAPACITY_REACHED``, with
``max_sessions``): no endpoint reports the limit beforehand. So the first refusal sets the cap, every later
session waits for a free slot, and the refused one is retried once a slot frees; the run goes on at
``min(sessions its workers want, max_concurrent_envs)``. A group that plays together holds all its slots at once
(``count``), so two half-seated groups never wait on each other.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from hermes_nb.frameworks.openenv.session import CapacityReached

T = TypeVar("T")

# A session closed by us is dropped by the server a moment later (when it sees the disconnect): a retry that
# still finds the server full waits this long before the next try.
RETRY_DELAY_S = 0.2
# Refusals of one session before it counts as the server's fault, not a race with a closing session.
MAX_RETRIES = 50


class SessionSlots:
    """``await slots.run(play)``: ``play`` (which opens one session) in a free slot, retried when the server is
    full, whose limit becomes the cap."""

    def __init__(self) -> None:
        self.cap: int | None = None  # unknown until the server refuses a session
        self.active = 0
        self._changed = asyncio.Condition()

    def fits(self, count: int) -> bool:
        """Whether ``count`` sessions may ever be open at once (the server's limit, where known, allows them)."""
        return self.cap is None or count <= self.cap

    @contextlib.asynccontextmanager
    async def held(self, count: int = 1) -> AsyncIterator[None]:
        async with self._changed:
            await self._changed.wait_for(
                lambda: self.cap is None or self.active + count <= self.cap or not self.fits(count)
            )
            if self.cap is not None and not self.fits(count):  # the cap fell below count while it waited
                raise CapacityReached(f"{count} sessions at once: the server holds {self.cap} at most", self.cap)
            self.active += count
        try:
            yield
        finally:
            async with self._changed:
                self.active -= count
                self._changed.notify_all()

    def lower_to(self, max_sessions: int) -> None:
        """The server holds ``max_sessions`` at most: no more slots than that from now on (at least one)."""
        self.cap = max(1, min(max_sessions, self.cap if self.cap is not None else max_sessions))

    async def run(self, play: Callable[[], Awaitable[T]], count: int = 1) -> T:
        """``play`` (which opens ``count`` sessions) in ``count`` free slots; the refusal is raised when the server
        turns out to hold fewer than ``count`` sessions at all."""
        for _ in range(MAX_RETRIES - 1):
            async with self.held(count):
                try:
                    return await play()
                except CapacityReached as full:
                    self.lower_to(full.max_sessions)
                    if not self.fits(count):
                        raise
            await asyncio.sleep(RETRY_DELAY_S)
        async with self.held(count):
            return await play()
