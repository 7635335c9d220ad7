"""Generation in a forked child process, so that a trainer's sampling and its training never share one GIL.

On CPU a small model's forward is mostly Python and operator dispatch, which hold the GIL: a sampler thread in
the trainer process and the training thread beside it then take turns on one core while the other core idles.
A forked child runs ``generate`` on its own interpreter instead. It is forked (not spawned) from the thread that
samples, once the policy's model exists, so it costs milliseconds and imports nothing; CUDA forbids forking an
initialised context, hence CPU models only (``can_fork``).

Weights: before the fork the model's tensors move to shared memory (``Module.share_memory``), so the child
samples from the very tensors the parent's engine loads new weights into. The parent talks to the child from one
thread and only between batches, so the child is idle whenever weights change and never sees a half-copied
update: the engine's guarantee of one policy version per batch holds unchanged.

Life: the child ignores SIGINT and SIGTERM (a run's process group is signalled as a whole, and the trainer
answers a stop by finishing its step, which may still sample), and it ends when its pipe closes (the engine
closes it, or the trainer exits) or, through ``PR_SET_PDEATHSIG``, when the thread that forked it dies, so a
trainer killed with -9 leaves nothing. A child that dies otherwise raises ``SamplerProcessExited`` in the parent.
It first closes the pipes and sockets it inherited: a copy of the trainer's pipe to its W&B mirror would keep the
mirror waiting for input, and the trainer at its exit waiting for the mirror.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from hermes_nb.inference.sampler import RowResult, SampleRow, device_generator, generate, model_device
from hermes_nb.system.processes import (
    can_close_inherited_descriptors,
    close_inherited_pipes_and_sockets,
    set_parent_death_signal,
    wait_while,
)

# A child asked to stop is idle (the parent sends only between batches), so it is gone within milliseconds.
JOIN_TIMEOUT_S = 5.0


class SamplerProcessExited(RuntimeError):
    """The sampler's child process ended while the engine still needed it."""


def can_fork(model: Any) -> bool:
    """Whether ``model`` can be sampled in a forked child: its tensors on the CPU, on a system with ``fork`` whose
    child can close the pipes and sockets it inherits (Linux)."""
    return hasattr(os, "fork") and can_close_inherited_descriptors() and model_device(model).type == "cpu"


def _serve(conn: Connection, model: Any, pad_id: int, decode: Callable[[list[int]], str], seed: int) -> None:
    """The child: one batch of rows in, its results (or the error) out, until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    set_parent_death_signal(signal.SIGKILL)
    close_inherited_pipes_and_sockets(keep={conn.fileno()})
    generator = device_generator(model_device(model), seed)
    while True:
        try:
            rows = conn.recv()
        except (EOFError, OSError):
            return
        try:
            results = generate(model, rows, pad_id=pad_id, decode=decode, generator=generator)
        except Exception as exc:  # the parent raises it for the requests of this batch
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            continue
        conn.send(("ok", results))


class SamplerProcess:
    """A forked child that generates with ``model`` (moved to shared memory first); ``generate`` from one thread.

    A bare ``os.fork``, not ``multiprocessing.Process``: the latter's exit handler joins its children, and this
    child, which ignores SIGTERM, ends only once this process has closed the pipe."""

    def __init__(self, model: Any, *, pad_id: int, decode: Callable[[list[int]], str], seed: int) -> None:
        model.share_memory()
        self.model = model
        self._conn, child_conn = multiprocessing.Pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: its end of the pipe only, so that it sees the parent's end close
            self._conn.close()
            code = 1
            try:
                _serve(child_conn, model, pad_id, decode, seed)
                code = 0
            finally:
                os._exit(code)
        child_conn.close()
        self._ended: str | None = None  # how the child ended, once reaped

    def generate(self, rows: list[SampleRow]) -> list[RowResult]:
        try:
            self._conn.send(rows)
            status, payload = self._conn.recv()
        except (EOFError, OSError) as exc:
            raise SamplerProcessExited(f"the sampler process (pid {self.pid}) exited ({self._reap(0.5)})") from exc
        if status == "error":
            raise RuntimeError(f"sampling failed in the sampler process: {payload}")
        results: list[RowResult] = payload
        return results

    def _running(self) -> bool:
        """Whether the child runs; once it has ended, reaps it and says how in ``self._ended``."""
        if self._ended is not None:
            return False
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            self._ended = "reaped by another waiter"
            return False
        if not pid:
            return True
        code = os.waitstatus_to_exitcode(status)
        self._ended = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return False

    def _reap(self, timeout_s: float) -> str:
        """Wait up to ``timeout_s`` for the child to end; how it ended, in words."""
        wait_while(self._running, timeout_s, poll_seconds=0.01)
        return self._ended or "still running"

    def close(self) -> None:
        """Close the pipe (the child's signal to exit) and reap it; one that does not end in time is killed."""
        self._conn.close()
        if self._reap(JOIN_TIMEOUT_S) == "still running":
            os.kill(self.pid, signal.SIGKILL)
            self._reap(JOIN_TIMEOUT_S)
