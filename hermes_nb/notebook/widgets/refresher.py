"""A daemon thread that calls ``tick`` every ``interval_s`` until ``tick`` says it is done or ``stop`` is called.

Shared by the live plot and the run monitor. The thread is a daemon so a forgotten widget never keeps the
kernel from exiting, and ``stop`` joins it, so a closed widget leaves no thread behind.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

# How long stop() waits for a tick in progress (a redraw, a status read) to finish.
STOP_JOIN_TIMEOUT_S = 10.0


class Refresher:
    def __init__(self, name: str, interval_s: float, tick: Callable[[], bool]) -> None:
        """``tick`` returns True to keep going; an exception in it is logged and ends the thread."""
        self._name = name
        self._interval_s = interval_s
        self._tick = tick
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(STOP_JOIN_TIMEOUT_S)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end by itself; True when it has."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    def _run(self) -> None:
        # Wait first: whoever starts the thread has just drawn the current state.
        while not self._stop.wait(self._interval_s):
            try:
                if not self._tick():
                    return
            except Exception:
                logger.exception("%s: refresh failed; no more updates", self._name)
                return
