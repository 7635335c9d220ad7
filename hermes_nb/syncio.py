"""Run a core coroutine from synchronous code, with or without an event loop already running in this thread.

Magics and widget callbacks are synchronous but run inside the Jupyter kernel's running loop, where neither
``asyncio.run`` nor ``loop.run_until_complete`` is allowed. ``run_sync`` hands the coroutine to one private
event loop in a daemon thread and waits for its result. The reasons for this choice over nest-asyncio2 (measured,
not assumed) are in docs/architecture.md, "Sync access".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_LOCK = threading.Lock()
_LOOP: asyncio.AbstractEventLoop | None = None
_THREAD: threading.Thread | None = None


def _runner_loop() -> asyncio.AbstractEventLoop:
    """The private loop, started on first use (and again if its thread died, e.g. after a fork)."""
    global _LOOP, _THREAD
    with _LOCK:
        if _LOOP is not None and _THREAD is not None and _THREAD.is_alive():
            return _LOOP
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            loop.run_forever()

        thread = threading.Thread(target=serve, name="hermes-nb-sync", daemon=True)
        thread.start()
        ready.wait()
        _LOOP, _THREAD = loop, thread
        return loop


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion and return its result (or raise its exception), from any synchronous code.

    Works in a plain script, in a Jupyter kernel (loop running in this thread) and in other threads. Do not
    call it from a coroutine that itself runs under ``run_sync``: that would wait on itself (``RuntimeError``).
    """
    loop = _runner_loop()
    if threading.current_thread() is _THREAD:
        coro.close()
        raise RuntimeError("run_sync called from inside run_sync's own loop; use 'await' there instead")
    future = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        return future.result()
    except KeyboardInterrupt:
        # Kernel interrupt: stop the coroutine too, so it does not keep running unseen.
        future.cancel()
        raise
    except concurrent.futures.CancelledError:
        raise asyncio.CancelledError() from None
