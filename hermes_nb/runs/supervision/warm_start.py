"""Warm starts: the kernel keeps warm kits (``runs.supervision.warm_kit``) ready, and hands the oldest to the next
run it starts.

A kernel holds ``HERMES_NB_WARM_KITS`` kits (2 by default, or 1). With two, no run trains beside the imports of the
kit for the run after it: a start takes one kit and leaves the other, the spare, for a start right after it (a stop,
then a start at once), and the kit it took is replaced once its run has ended, while nothing trains. With one, the
kit for the next run is made once the run has trained its first step (nothing of it competes with that run's start),
and its imports, at the lowest scheduling weight, still cost a short run about a fifth of its step time
(``bench/next_kit_cost.py``); one kit is half the idle memory.

When kits are made, by a thread of the kernel, one after another (each once the one before has imported, so that
the first is ready soonest):

- when an environment is selected (``prepare_first``, told by ``selection.listeners``): selecting is the step before
  a first run, taken by every face (a cell, ``%rl_select``, the picker, the config form's environment), a few
  seconds to minutes before ``rl_start_training``; loading the extension would warm kernels that only browse runs,
  and waiting for the config form would miss those who train from cells. Kits are made up to the number held.
- after a start (``prepare_next``): where it took the last kit, one once its run has trained its first step (so a
  start right after a stop still finds a kit); then, once the run has ended, up to the number held.

The next ``rl_start_training`` hands its run to the oldest kit instead of starting a supervisor and three cold
interpreters, and a kit still importing is handed it too (it finishes its imports first, which is sooner than a cold
start). A kit is used only by what would have started the same processes cold: the same Python, the same installed
code (``install_stamp``), the same environment variables and working directory as when it was made; anything else,
or a kit that ended meanwhile, means a cold start (and new kits). ``HERMES_NB_WARM_START=0`` turns it off. A kit is
gone when its kernel ends (the pipe it waits on closes) or after ``warm_kit.IDLE_TIMEOUT_S``.
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

from hermes_nb.errors import ConfigError
from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.protocol.run_state import RunStateUnreadable, read_run_state
from hermes_nb.runs.supervision.warm_kit import KIT_MODULE, HandOver
from hermes_nb.system import home
from hermes_nb.system.processes import spawn_group

log = logging.getLogger("hermes_nb.warm_start")

WARM_START_VAR = "HERMES_NB_WARM_START"
KITS_VAR = "HERMES_NB_WARM_KITS"
DEFAULT_KITS = 2
ALLOWED_KITS = (1, 2)
# What a kit's processes import, by version: a new wheel of any of them means new code.
STAMPED_DISTRIBUTIONS = ("torch", "transformers", "pydantic", "fastapi", "uvicorn")
# The intermediate process forks the kit and exits before importing anything heavy.
KIT_DETACH_TIMEOUT_S = 30.0
# How often a run (or a kit's imports) is looked at while a kit waits to be made: two stats a second.
FOLLOW_POLL_S = 0.5
# A run that never trains (a failed start, a long first step) does not keep the next one cold for longer.
FOLLOW_TIMEOUT_S = 120.0
# The kit after another is made once that one has imported; one stalled by a loaded machine is not waited for
# longer than a cold start's imports could take.
READY_WAIT_S = 120.0


def enabled() -> bool:
    return os.environ.get(WARM_START_VAR, "1").strip().lower() not in {"0", "false", "no", "off"}


def kits_held() -> int:
    """How many warm kits a kernel holds (``HERMES_NB_WARM_KITS``); a value other than 1 or 2 is a ConfigError."""
    raw = os.environ.get(KITS_VAR, str(DEFAULT_KITS)).strip()
    if raw not in {str(n) for n in ALLOWED_KITS}:
        raise ConfigError(f"{KITS_VAR}={raw!r}: expected 1 or 2 (how many warm kits a kernel holds; 2 by default)")
    return int(raw)


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


@dataclass(frozen=True)
class _Plan:
    """What the kit-making thread does: follow the run at ``follows`` until it ends (``_follow``), where there is
    one; then make kits up to ``held``, each logging to ``log_path`` (the home's when it was planned)."""

    held: int
    log_path: Path
    follows: RunPaths | None = None


@dataclass
class _Maker:
    """The thread that makes kits. ``cancelled`` ends it at its next wait, never in the middle of a spawn (a kit it
    has begun is finished and held: a start right after a selection takes it); ``discarded`` also ends a kit it was
    spawning."""

    thread: threading.Thread
    cancelled: threading.Event
    discarded: threading.Event


_kits: list[WarmKit] = []  # oldest first: the next start takes the first
_maker: _Maker | None = None
# Kits are added by the maker's thread and taken by the caller's.
_lock = threading.Lock()


def hand_over(paths: RunPaths) -> bool:
    """Give the run at ``paths`` to the kernel's oldest warm kit; False where there is none that may serve it."""
    _settle_maker()
    with _lock:
        kit = _kits.pop(0) if _kits else None
    if kit is None:
        return False
    key = KitKey.now()
    if key != kit.key:
        kit.close()
        _discard_kits()  # made with the same key as this one
        return False
    message = HandOver(run_id=paths.run_id, environment=dict(os.environ), cwd=key.cwd)
    try:
        os.write(kit.write_fd, message.model_dump_json().encode() + b"\n")
    except BrokenPipeError:
        return False  # the kit ended (idle, or killed): this run starts cold
    finally:
        kit.close()
    return True


def _settle_maker() -> None:
    """Before a start: the kit-making thread is cancelled (this start plans the next kits). With no kit held, it is
    waited for, as one it is spawning (a start right after a selection) is this start's (the spawn takes well under
    a second; a cancelled wait ends at once)."""
    global _maker
    maker, _maker = _maker, None
    if maker is None:
        return
    maker.cancelled.set()
    with _lock:
        held = len(_kits)
    if held == 0:
        maker.thread.join(KIT_DETACH_TIMEOUT_S)


def prepare_first() -> None:
    """Make kits now, up to the number held, for a first run soon (an environment was selected), unless they are
    made, on their way or off. Kits made for another environment or install than now's are replaced."""
    if not enabled() or (_maker is not None and _maker.thread.is_alive()):
        return
    try:
        held = kits_held()
    except ConfigError as exc:
        log.warning("no warm kit: %s", exc)  # a start refuses the value, naming the variable
        return
    with _lock:
        keys = {kit.key for kit in _kits}
    if keys and keys != {KitKey.now()}:  # the install stamp reads every module file: only where there are kits
        _discard_kits()
    _start_maker(_Plan(held=held, log_path=_kit_log()))


def prepare_next(paths: RunPaths) -> None:
    """Plan the kits the kernel holds after the start of the run at ``paths``: where the start took the last kit,
    one once the run has trained its first step, so that nothing of it competes with that start; then, once the run
    has ended, up to the number held."""
    if not enabled():
        return
    _start_maker(_Plan(held=kits_held(), log_path=_kit_log(), follows=paths))


def _start_maker(plan: _Plan) -> None:
    global _maker
    cancelled, discarded = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=_make_kits, args=(plan, cancelled, discarded), name="hermes-nb warm kit", daemon=True
    )
    _maker = _Maker(thread=thread, cancelled=cancelled, discarded=discarded)
    thread.start()


def _make_kits(plan: _Plan, cancelled: threading.Event, discarded: threading.Event) -> None:
    if plan.follows is not None and not _follow(plan, cancelled, discarded):
        return
    while True:
        with _lock:  # a kit still held has its pipe open: a hand-over or discard closes it only once taken out
            if len(_kits) >= plan.held:
                return
            newest = _kits[-1] if _kits else None
            watched = os.dup(newest.ready_fd) if newest is not None else None
        if newest is not None and watched is not None and not _imported(newest, watched, cancelled):
            return
        if not _add_kit(plan.log_path, cancelled, discarded):
            return


def _follow(plan: _Plan, cancelled: threading.Event, discarded: threading.Event) -> bool:
    """Follow the run ``plan`` follows until it ends (False when cancelled). Where no kit is held once it has
    trained its first step (its start took the last), one is made then, so that a start right after a stop still
    finds one; a run that has not trained within ``FOLLOW_TIMEOUT_S`` gets none before it ends."""
    assert plan.follows is not None
    if _run_reaches(plan.follows, cancelled, first_step=True):
        with _lock:
            none_held = not _kits
        if none_held and not _add_kit(plan.log_path, cancelled, discarded):
            return False
    return not cancelled.is_set() and _run_reaches(plan.follows, cancelled, first_step=False)


def _add_kit(log_path: Path, cancelled: threading.Event, discarded: threading.Event) -> bool:
    """Spawn a kit and hold it (one whose spawn has begun is held even if the making was cancelled meanwhile, not if
    the kits were discarded); False when there is none, or the making was cancelled."""
    if discarded.is_set():
        return False
    kit = _spawn_kit(log_path)
    if kit is None:
        return False
    with _lock:
        if not discarded.is_set():
            _kits.append(kit)
            kit = None
    if kit is not None:
        kit.close()
    return not cancelled.is_set()


def _run_reaches(paths: RunPaths, cancelled: threading.Event, *, first_step: bool) -> bool:
    """Wait until the run trained a step (``first_step``; within ``FOLLOW_TIMEOUT_S``) or ended (True), or the
    wait was cancelled or ran out (False)."""
    deadline = time.monotonic() + FOLLOW_TIMEOUT_S if first_step else float("inf")
    while time.monotonic() < deadline:
        if first_step and paths.metrics.is_file() and paths.metrics.stat().st_size > 0:
            return True
        try:
            if read_run_state(paths.run_dir).is_terminal:
                return True
        except RunStateUnreadable:
            pass  # being written, or damaged: its readers say so; the kit waits
        if cancelled.wait(FOLLOW_POLL_S):
            return False
    return False


def _imported(kit: WarmKit, watched: int, cancelled: threading.Event) -> bool:
    """Wait until ``kit`` has imported (or ended: the next kit is made either way), up to ``READY_WAIT_S``; False
    when cancelled. ``watched`` is this thread's duplicate of the kit's ready pipe (closed here), which it only
    selects on: ``wait_until_ready`` reads the byte, and says so in ``kit.ready``."""
    try:
        deadline = time.monotonic() + READY_WAIT_S
        while not cancelled.is_set() and not kit.ready and time.monotonic() < deadline:
            readable, _, _ = select.select([watched], [], [], FOLLOW_POLL_S)
            if readable:
                break
    finally:
        os.close(watched)
    return not cancelled.is_set()


def _kit_log() -> Path:
    return home.logs_dir() / "warm_kit.log"


def _spawn_kit(log_path: Path) -> WarmKit | None:
    key = KitKey.now()
    read_fd, write_fd = os.pipe()
    ready_read, ready_write = os.pipe()
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
    """Whether the kit the next start takes has its processes imported, waiting up to ``timeout`` seconds for it
    (a benchmark or a test that wants the next start warm; a user never needs to)."""
    deadline = time.monotonic() + timeout
    while True:
        with _lock:
            kit = _kits[0] if _kits else None
        maker = _maker
        if kit is not None or maker is None or not maker.thread.is_alive() or time.monotonic() >= deadline:
            break
        time.sleep(0.05)  # the maker's thread is making it
    if kit is None or kit.ready:
        return kit is not None
    readable, _, _ = select.select([kit.ready_fd], [], [], max(0.0, deadline - time.monotonic()))
    kit.ready = bool(readable) and os.read(kit.ready_fd, 1) == b"1"
    return kit.ready


def _discard_kits() -> None:
    with _lock:
        kits = list(_kits)
        _kits.clear()
    for kit in kits:
        kit.close()


def discard() -> None:
    """End the kernel's kits, and any it is about to make (at exit; or to make the next run start cold)."""
    global _maker
    if _maker is not None:
        _maker.discarded.set()
        _maker.cancelled.set()
        _maker = None
    _discard_kits()


atexit.register(discard)
