"""Starting, identifying and ending child processes: a run's, and the temporary servers of a model test.

Each child starts in its own session (so its own process group): stopping signals the whole group,
so it reaches the grandchildren (uvicorn workers, W&B's service) that a signal to the child alone leaves
running. A process is named by pid *and* start time, so a pid the OS reused for something else is never signalled.
Ending is SIGTERM, a grace period, then SIGKILL: ``terminate_groups`` for blocking callers (the supervisor),
``stop_process_group`` for a coroutine (it does not block the event loop, and still kills when cancelled).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path

import psutil

from hermes_nb.protocol.run_state import ProcessRecord
from hermes_nb.system.logtail import tail_lines

# Linux: ask the kernel to SIGTERM a child when the thread that started it dies, so a supervisor or a kernel
# killed with -9 orphans nothing.
_PR_SET_PDEATHSIG = 1
# Where Linux lists a process's open descriptors, each a link to what it is ("pipe:[…]", "socket:[…]", a path).
_OWN_DESCRIPTORS = "/proc/self/fd"
# Each look at a group scans the process table, hence a coarser poll than for one process.
GROUP_POLL_SECONDS = 0.05
# A SIGKILLed process is gone within milliseconds; the bound is for a machine stalled by load (or a process stuck
# in the kernel, which nothing can end sooner).
KILLED_GONE_SECONDS = 10.0
# Lines of a child's log quoted when it failed: the end of a traceback, short enough for a result table.
FAILURE_TAIL_LINES = 8


def set_parent_death_signal(signum: int = signal.SIGTERM) -> None:
    """Ask the kernel for ``signum`` when the thread that started this process dies (Linux; elsewhere nothing)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signum)


def close_inherited_pipes_and_sockets(keep: Collection[int] = ()) -> None:
    """In a forked child: close every pipe and socket it inherited, except the standard streams and ``keep``.

    A fork copies every descriptor, and a pipe's reader sees end-of-file only once every copy of its write end is
    closed: a child that kept its parent's pipe to a subprocess would keep that subprocess waiting for input after
    the parent closed it, and one that kept a listening socket would keep the port answering. Files stay open (the
    shared-memory files behind a model's tensors among them). Reads ``/proc/self/fd``: Linux only."""
    for name in os.listdir(_OWN_DESCRIPTORS):
        descriptor = int(name)
        if descriptor <= 2 or descriptor in keep:
            continue
        try:  # the listing's own descriptor is closed by the time it is read
            target = os.readlink(f"{_OWN_DESCRIPTORS}/{descriptor}")
        except OSError:
            continue
        if target.startswith(("pipe:", "socket:")):
            os.close(descriptor)


def can_close_inherited_descriptors() -> bool:
    """Whether this system lists a process's descriptors where ``close_inherited_pipes_and_sockets`` reads them."""
    return os.path.isdir(_OWN_DESCRIPTORS)


def child_environment(threads: int | None = None) -> dict[str, str]:
    """This process's environment for a child (keys reach it here, never in argv), its output unbuffered so that
    its log is current. ``threads`` caps the native thread pools of a child that shares the cores with others."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
        env["TOKENIZERS_PARALLELISM"] = "false"  # the tokenizers pool would compete for the same cores
    return env


LOG_FILE_MODE = 0o600


def spawn_group(
    argv: Sequence[str],
    log_path: Path,
    env: Mapping[str, str] | None = None,
    *,
    cwd: Path | None = None,
    die_with_parent: bool = True,
    stdin: int = subprocess.DEVNULL,
    pass_fds: Sequence[int] = (),
    own_session: bool = True,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session (its own process group) with stdout and stderr appended to ``log_path``.

    Secrets reach the child through ``env`` only; ``argv`` never carries one. ``stdin`` is closed unless the child
    is to be told something (``subprocess.PIPE``: a warm process's assignment); ``pass_fds`` stay open in it.
    ``own_session=False`` leaves it in the caller's session and group: a warm process, which starts its own session
    when it is assigned (``hermes_nb.system.warm_process``).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # 0600: a log may show what a run trains on and where it listens; other local users have no business there.
    with open(os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, LOG_FILE_MODE), "ab", buffering=0) as log:
        return subprocess.Popen(
            list(argv),
            stdin=stdin,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=str(cwd) if cwd else None,
            start_new_session=own_session,
            preexec_fn=set_parent_death_signal if die_with_parent else None,
            pass_fds=tuple(pass_fds),
        )


def spawn(
    name: str,
    argv: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    die_with_parent: bool = True,
) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
    """``spawn_group``, and the record that names the child by pid and start time."""
    proc = spawn_group(argv, log_path, env, cwd=cwd, die_with_parent=die_with_parent)
    return proc, process_record(name, proc.pid, log_path)


def process_record(name: str, pid: int, log_path: Path) -> ProcessRecord:
    """The record that names process ``pid`` by pid and start time."""
    return ProcessRecord(name=name, pid=pid, started_at=process_start_time(pid) or time.time(), log_path=str(log_path))


def process_start_time(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def is_same_process_alive(record: ProcessRecord) -> bool:
    """True when ``record.pid`` is alive *and* is the process that was started (same start time)."""
    try:
        proc = psutil.Process(record.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        # create_time is rounded differently by platforms; a reused pid starts much later than 1 s apart.
        return abs(proc.create_time() - record.started_at) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def descendants(record: ProcessRecord) -> list[psutil.Process]:
    if not is_same_process_alive(record):
        return []
    try:
        return list(psutil.Process(record.pid).children(recursive=True))
    except psutil.NoSuchProcess:
        return []


def _killpg_quietly(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    # Zombies keep the group "alive" to killpg(0) until reaped; only count live members.
    return any(_in_group_and_live(p, pgid) for p in psutil.process_iter(["pid"]))


def _in_group_and_live(proc: psutil.Process, pgid: int) -> bool:
    try:
        return os.getpgid(proc.pid) == pgid and _live(proc)
    except (ProcessLookupError, PermissionError):
        return False


def _live(proc: psutil.Process) -> bool:
    """Running and not a zombie: a zombie runs nothing, and an orphan's zombie is init's to reap, not ours."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_while(condition: Callable[[], bool], seconds: float, *, poll_seconds: float) -> None:
    """Return once ``condition`` is false, or after ``seconds``, whichever comes first."""
    deadline = time.monotonic() + seconds
    while condition() and time.monotonic() < deadline:
        time.sleep(poll_seconds)


def _kill_surviving_groups(pgids: Iterable[int]) -> None:
    for pgid in pgids:
        if group_alive(pgid):
            _killpg_quietly(pgid, signal.SIGKILL)


def terminate_groups(records: Iterable[ProcessRecord], *, grace_seconds: float) -> None:
    """SIGTERM each group, wait up to ``grace_seconds`` for all of them, then SIGKILL what is left and return once
    it is gone: a SIGKILL is delivered, not done, when ``killpg`` returns, and a caller that then says "stopped"
    must find nothing running."""
    pgids = [r.pid for r in records]
    for pgid in pgids:
        _killpg_quietly(pgid, signal.SIGTERM)
    wait_while(lambda: any(group_alive(p) for p in pgids), grace_seconds, poll_seconds=GROUP_POLL_SECONDS)
    _kill_surviving_groups(pgids)
    wait_while(lambda: any(group_alive(p) for p in pgids), KILLED_GONE_SECONDS, poll_seconds=GROUP_POLL_SECONDS)


async def stop_process_group(proc: subprocess.Popen[bytes], *, grace_seconds: float, poll_seconds: float) -> None:
    """``terminate_groups`` for a coroutine: SIGTERM the group of ``proc`` (started by ``spawn_group``), SIGKILL
    what is left after ``grace_seconds``, and reap ``proc``.

    The kill and the reap also happen when this wait is itself cancelled, so nothing outlives its caller.
    """
    _killpg_quietly(proc.pid, signal.SIGTERM)
    try:
        deadline = time.monotonic() + grace_seconds
        while group_alive(proc.pid) and time.monotonic() < deadline:
            await asyncio.sleep(poll_seconds)
    finally:
        _kill_surviving_groups([proc.pid])
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_seconds)  # reaps the zombie; immediate after SIGKILL


def _wait_gone(processes: list[psutil.Process], seconds: float) -> None:
    wait_while(lambda: any(_live(proc) for proc in processes), seconds, poll_seconds=0.01)


def _signal_each(processes: list[psutil.Process], sig: int) -> None:
    for proc in processes:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            continue


def end_processes(processes: Iterable[psutil.Process], *, grace_seconds: float) -> None:
    """SIGTERM each live process, SIGKILL what outlives ``grace_seconds``, and return once all are gone.

    For processes outside the run's groups (W&B's service starts its own session): the grace lets one flush its
    files, and waiting for the end lets a caller that then reports "stopped" tell the truth.
    """
    targets = [proc for proc in processes if _live(proc)]
    _signal_each(targets, signal.SIGTERM)
    _wait_gone(targets, grace_seconds)
    survivors = [proc for proc in targets if _live(proc)]
    _signal_each(survivors, signal.SIGKILL)
    _wait_gone(survivors, grace_seconds)


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def failure_message(what: str, proc: subprocess.Popen[bytes], log_path: Path) -> str:
    """``what`` and how it ended (or that it did not), with the last lines of its log."""
    code = proc.poll()
    state = describe_exit(code) if code is not None else "did not finish"
    tail = "\n".join(tail_lines(log_path, FAILURE_TAIL_LINES))
    return f"{what} {state}; last lines of {log_path}:\n{tail}" if tail else f"{what} {state} (log {log_path} is empty)"


def send_signal(record: ProcessRecord, sig: int) -> bool:
    """Signal one process, only if it is still the one recorded (pid and start time)."""
    if not is_same_process_alive(record):
        return False
    try:
        os.kill(record.pid, sig)
        return True
    except ProcessLookupError:
        return False


def run_detached(main: Callable[[], int]) -> int:
    """Double fork, then ``main()`` in the grandchild, which is nobody's child: a closing kernel neither waits for
    it nor reaps it (a run's supervisor, a sweep's driver). The caller's process returns 0 at once."""
    if os.fork() > 0:
        return 0
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    code = 1
    try:
        code = main()
    finally:
        logging.shutdown()
        os._exit(code)
