"""Warm starts: the kernel keeps one warm kit (``runs.supervision.warm_kit``) ready, and hands it the next run
it starts.

A kernel makes its first kit when an environment is selected (``prepare_first``, told by ``selection.listeners``):
selecting is the step before a first run, taken by every face (a cell, ``%rl_select``, the picker, the config form's
environment), a few seconds to minutes before ``rl_start_training``; loading the extension would warm kernels that
only browse runs, and waiting for the config form would miss those who train from cells. Every run a kernel (or
script) starts then leaves a kit behind it, made by a thread of the kernel once that run has trained its first step
(nothing of it competes with that start); the next ``rl_start_training`` hands its run to the kit instead of starting
a supervisor and three cold interpreters, and a kit still importing is handed it too (it finishes its imports first,
which is sooner than a cold start). A kit is used only by what would have started the same processes cold: the same
Python, the same installed code (``install_stamp``), the same environment variables and working directory as when it
was made; anything else, or a kit that ended meanwhile, means a cold start (and a new kit). ``HERMES_NB_WARM_START=0``
turns it off. A kit is gone when its kernel ends (the pipe it waits on closes) or after ``warm_kit.IDLE_TIMEOUT_S``.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.protocol.run_state import RunStateUnreadable, read_run_state
from hermes_nb.runs.supervision.warm_kit import KIT_MODULE, HandOver
from hermes_nb.system import home
from hermes_nb.system.processes import spawn_group

log = logging.getLogger("hermes_nb.warm_start")

WARM_START_VAR = "HERMES_NB_WARM_START"
# What a kit's processes import, by version: a new wheel of any of them means new code.
STAMPED_DISTRIBUTIONS = ("torch", "transformers", "pydantic", "fastapi", "uvicorn")
# The intermediate process forks the kit and exits before importing anything heavy.
KIT_DETACH_TIMEOUT_S = 30.0
# How often the run a kit follows is looked at before the kit is made: two stats a second.
FOLLOW_POLL_S = 0.5
# A run that never trains (a failed start, a long first step) does not keep the next one cold for longer.
FOLLOW_TIMEOUT_S = 120.0


def enabled() -> bool:
    return os.environ.get(WARM_START_VAR, "1").strip().lower() not in {"0", "false", "no", "off"}


def install_stamp(package_dir: Path = home.PACKAGE_DIR) -> str:
    """A digest of what a warm process has imported: the interpreter, every module file of hermes_nb (path, size,
    modification time) and the versions of the libraries it imports. Any change to them changes it."""
    digest = hashlib.sha256(sys.executable.encode())
    for path in sorted(package_dir.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(package_dir)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    for name in STAMPED_DISTRIBUTIONS:
        try:
            digest.update(f"{name}=={metadata.version(name)}\n".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name} absent\n".encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class KitKey:
    """What a kit was made for; it serves a run only where everything here is still the same."""

    stamp: str
    environment: tuple[tuple[str, str], ...]
    cwd: str

    @classmethod
    def now(cls) -> KitKey:
        return cls(stamp=install_stamp(), environment=tuple(sorted(os.environ.items())), cwd=os.getcwd())


@dataclass
class WarmKit:
    """The kernel's end of a kit: the write end of the pipe the kit waits on, the read end of the one it says it
    is warm on."""

    write_fd: int
    ready_fd: int
    key: KitKey
    ready: bool = False

    def close(self) -> None:
        """The kit reads the end of its pipe and exits, with its warm processes."""
        for fd in (self.write_fd, self.ready_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


@dataclass
class _Pending:
    """The thread that makes the next kit: once the run it follows has trained a step, or at once (``follows_run``
    False: a start waits for it, as its kit is on its way)."""

    thread: threading.Thread
    cancelled: threading.Event
    follows_run: bool


_kit: WarmKit | None = None
_pending: _Pending | None = None
# The kit is made by a thread and taken by the caller's: one at a time.
_lock = threading.Lock()


def hand_over(paths: RunPaths) -> bool:
    """Give the run at ``paths`` to the kernel's warm kit; False where there is none that may serve it."""
    global _kit
    _settle_pending()
    with _lock:
        kit, _kit = _kit, None
    if kit is None:
        return False
    key = KitKey.now()
    if key != kit.key:
        kit.close()
        return False
    message = HandOver(run_id=paths.run_id, environment=dict(os.environ), cwd=key.cwd)
    try:
        os.write(kit.write_fd, message.model_dump_json().encode() + b"\n")
    except BrokenPipeError:
        return False  # the kit ended (idle, or killed): this run starts cold
    finally:
        kit.close()
    return True


def _settle_pending() -> None:
    """Before a start: a kit being made now is waited for (the kit detaches in well under a second); one waiting
    for a run's first step is cancelled, as this start's run makes the next."""
    global _pending
    pending, _pending = _pending, None
    if pending is None:
        return
    if pending.follows_run:
        pending.cancelled.set()
    else:
        pending.thread.join(KIT_DETACH_TIMEOUT_S)


def prepare_first() -> None:
    """Make a kit now, for a first run soon (an environment was selected), unless one is made, on its way or off.
    A kit made for another environment or install than now's is replaced."""
    pending = _pending
    if not enabled() or (pending is not None and pending.thread.is_alive()):
        return
    with _lock:
        kit = _kit
    if kit is not None and kit.key == KitKey.now():
        return
    discard()
    _start_pending(None)


def prepare_next(paths: RunPaths) -> None:
    """Leave a kit ready for the kernel's next run: made by a thread of this process once the run at ``paths`` has
    trained its first step (or ended), so that nothing of it competes with that run's start."""
    if not enabled():
        return
    discard()
    _start_pending(paths)


def _start_pending(follows: RunPaths | None) -> None:
    """Start the thread that makes the kit: after the run at ``follows`` trained a step, or at once (None)."""
    global _pending
    cancelled = threading.Event()
    thread = threading.Thread(target=_make_kit, args=(follows, cancelled), name="hermes-nb warm kit", daemon=True)
    _pending = _Pending(thread=thread, cancelled=cancelled, follows_run=follows is not None)
    thread.start()


def _first_step_or_end(paths: RunPaths, cancelled: threading.Event) -> bool:
    """Wait until the run trained a step or ended (True), or the wait was cancelled or ran out (False)."""
    deadline = time.monotonic() + FOLLOW_TIMEOUT_S
    while time.monotonic() < deadline:
        if paths.metrics.is_file() and paths.metrics.stat().st_size > 0:
            return True
        try:
            if read_run_state(paths.run_dir).is_terminal:
                return True
        except RunStateUnreadable:
            pass  # being written, or damaged: its readers say so; the kit waits for the metrics
        if cancelled.wait(FOLLOW_POLL_S):
            return False
    return False


def _make_kit(follows: RunPaths | None, cancelled: threading.Event) -> None:
    global _kit
    if follows is not None and not _first_step_or_end(follows, cancelled):
        return
    with _lock:
        if cancelled.is_set():
            return
        _kit = _spawn_kit()


def _spawn_kit() -> WarmKit | None:
    key = KitKey.now()
    read_fd, write_fd = os.pipe()
    ready_read, ready_write = os.pipe()
    log_path = home.logs_dir() / "warm_kit.log"
    argv = [sys.executable, "-m", KIT_MODULE, "--detach", str(read_fd), str(ready_write), str(log_path)]
    try:
        proc = spawn_group(argv, log_path, die_with_parent=False, pass_fds=(read_fd, ready_write))
    finally:
        os.close(read_fd)
        os.close(ready_write)
    try:
        code = proc.wait(timeout=KIT_DETACH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    kit = WarmKit(write_fd=write_fd, ready_fd=ready_read, key=key)
    if code != 0:
        # A kit only makes the next start faster: without one it starts cold. Its log says why.
        log.warning("no warm kit for the next run (exit %s; log: %s)", code, log_path)
        kit.close()
        return None
    return kit


def wait_until_ready(timeout: float) -> bool:
    """Whether the kernel's kit has its processes imported, waiting up to ``timeout`` seconds for it (a benchmark
    or a test that wants the next start warm; a user never needs to)."""
    deadline = time.monotonic() + timeout
    pending = _pending
    if pending is not None:
        pending.thread.join(timeout)
    timeout = max(0.0, deadline - time.monotonic())
    kit = _kit
    if kit is None or kit.ready:
        return kit is not None
    readable, _, _ = select.select([kit.ready_fd], [], [], timeout)
    kit.ready = bool(readable) and os.read(kit.ready_fd, 1) == b"1"
    return kit.ready


def discard() -> None:
    """End the kernel's kit, if it has one or is about to make one (at exit; or to make the next run start cold)."""
    global _kit, _pending
    if _pending is not None:
        _pending.cancelled.set()
        _pending = None
    with _lock:
        if _kit is not None:
            _kit.close()
            _kit = None


atexit.register(discard)
