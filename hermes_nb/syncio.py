"""Run a core coroutine from synchronous code, with or without an event loop already running in this thread.

Two cases, chosen on measured evidence (docs/architecture.md, "Sync access"):

- A loop is running in this thread (a magic or widget callback in a Jupyter kernel): the coroutine runs on that
  same loop, re-entered with nest-asyncio2. Objects bound to the kernel's loop (an ``asyncio.Event``, a client
  made in an ``await`` cell) keep working, background tasks on it keep running, and nested calls work.
- No loop is running here (a script, the CLI, a daemon thread): the coroutine runs on one private event loop in
  a daemon thread, so nothing global is patched where nothing needs to be. ``asyncio.run`` is never used.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_LOCK = threading.Lock()
_LOOP: asyncio.AbstractEventLoop | None = None
_THREAD: threading.Thread | None = None
_NESTED: set[int] = set()  # id() of the running loops already made re-entrant


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion and return its result (or raise its exception), from any synchronous code."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return _run_on_private_loop(coro)
    return _run_nested(running, coro)


def _run_nested(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    if id(loop) not in _NESTED:
        import nest_asyncio2

        nest_asyncio2.apply(loop)
        _NESTED.add(id(loop))
    return loop.run_until_complete(coro)


def _private_loop() -> asyncio.AbstractEventLoop:
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


def _run_on_private_loop(coro: Coroutine[Any, Any, T]) -> T:
    future = asyncio.run_coroutine_threadsafe(coro, _private_loop())
    try:
        return future.result()
    except KeyboardInterrupt:
        future.cancel()  # Ctrl-C: stop the coroutine too, so it does not keep running unseen
        raise
