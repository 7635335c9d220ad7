"""A pre-imported process: started ahead of a run with its heavy imports done, it becomes one of the run's
processes when it is handed the command line the supervisor would have started (``python -m MODULE ARGS``).

    python -m hermes_nb.system.warm_process READY_FD MODULE_TO_IMPORT [...]

It imports the named modules, writes a byte to ``READY_FD`` (its starter's pipe) and closes it, then blocks on one
JSON line on its stdin (no CPU while it waits): the module to run, its arguments, its whole environment and its
log. It then is that process exactly as a cold start would be: its own session and process group (started then),
the run's environment (secrets included) in place of the one it started with, stdout and stderr appended to the
run's log, and the module run as ``__main__``. An end of file instead (its starter went away, or did not need it)
ends it. One assignment per process: it never serves twice.

Until it is assigned it runs at the lowest priority: a kit is made while the run before it trains, and its
seconds of imports would otherwise be taken from that run's steps. Lowering a priority is allowed to anyone, but
raising a nice value again needs privileges, so what is lowered is what the run's process leaves behind:

- Its session's scheduling group. Where the kernel groups processes by session (``sched_autogroup``), each session
  gets an equal share of the cores whatever its processes' nice values, so a warm process in a session of its own
  would take as much as the run's trainer. Warm processes start in their kit's session instead, whose group the kit
  gives the lowest weight (``lower_session_priority``); an assigned process starts a session of its own, whose new
  group has the default weight, before it runs anything. A group's weight, unlike a nice value, may be set back to
  the default without privileges (only a weight above it needs them): a kit handed a run while its processes still
  import does so (``restore_session_priority``), since they are that run's now.
- Its importing thread's nice value (``IMPORT_NICE``), for kernels without session groups: on Linux a nice value
  belongs to one thread, and the main thread, which becomes the run's process, keeps the one it started with.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib
import json
import os
import runpy
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ValidationError

from hermes_nb.system.processes import LOG_FILE_MODE, spawn_group, wait_while

WARM_MODULE = "hermes_nb.system.warm_process"
# The importing thread's nice value, and the weight of the kit's session: they run on what the cores have to spare.
IMPORT_NICE = 19
AUTOGROUP_FILE = "/proc/self/autogroup"
# A new session's group weight: the one a cold start's processes get.
DEFAULT_SESSION_NICE = 0
# An assigned process starts its own session first thing; the bound is for a machine stalled by load.
SESSION_WAIT_S = 30.0


class Assignment(BaseModel):
    """What a warm process is told to become: ``python -m module *args`` with ``environment``, logging to
    ``log_path``."""

    module: str
    args: list[str]
    environment: dict[str, str]
    log_path: str


def spawn_warm(
    imports: Sequence[str], log_path: Path, env: Mapping[str, str], ready_fd: int
) -> subprocess.Popen[bytes]:
    """A warm process importing ``imports``; until assigned it stays in its starter's session and its output goes to
    ``log_path``. It writes to ``ready_fd`` once imported, and dies with the thread that starts it (the
    supervisor-to-be)."""
    argv = [sys.executable, "-m", WARM_MODULE, str(ready_fd), *imports]
    return spawn_group(argv, log_path, env, stdin=subprocess.PIPE, pass_fds=(ready_fd,), own_session=False)


def lower_session_priority() -> None:
    """Give this process's session scheduling group the lowest weight (Linux with ``sched_autogroup``; elsewhere
    nothing): its warm processes then take only what the cores have to spare."""
    with contextlib.suppress(OSError):
        Path(AUTOGROUP_FILE).write_text(str(IMPORT_NICE), encoding="ascii")


def restore_session_priority() -> None:
    """Give this process's session scheduling group the default weight again: what it still imports is a run's."""
    with contextlib.suppress(OSError):
        Path(AUTOGROUP_FILE).write_text(str(DEFAULT_SESSION_NICE), encoding="ascii")


def assignment_for(argv: Sequence[str], environment: Mapping[str, str], log_path: Path) -> Assignment | None:
    """The assignment that makes a warm process the command ``argv``; None when a warm process cannot be it (another
    interpreter, or not ``-m MODULE``): that command starts cold."""
    if len(argv) < 3 or argv[0] != sys.executable or argv[1] != "-m":
        return None
    return Assignment(module=argv[2], args=list(argv[3:]), environment=dict(environment), log_path=str(log_path))


def assign(process: subprocess.Popen[bytes], assignment: Assignment) -> bool:
    """Hand ``assignment`` over; False when the process is gone (it can then not be the run's). Returns once it
    leads its own process group, so that signals to the run's groups reach it as they reach a cold process."""
    assert process.stdin is not None  # spawn_warm opens it
    try:
        process.stdin.write(assignment.model_dump_json().encode() + b"\n")
        process.stdin.close()
    except (BrokenPipeError, ValueError):
        return False
    wait_while(lambda: process.poll() is None and not _leads_its_group(process), SESSION_WAIT_S, poll_seconds=0.002)
    return process.poll() is None and _leads_its_group(process)


def _leads_its_group(process: subprocess.Popen[bytes]) -> bool:
    try:
        return os.getpgid(process.pid) == process.pid
    except ProcessLookupError:
        return False


def release(process: subprocess.Popen[bytes]) -> None:
    """End a warm process that will not be assigned: the end of its stdin makes it exit; reaped here."""
    if process.stdin is not None and not process.stdin.closed:
        with contextlib.suppress(BrokenPipeError):
            process.stdin.close()
    try:
        process.wait(timeout=10.0)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def end_now(process: subprocess.Popen[bytes]) -> None:
    """End a warm process that may still be importing (it reads its stdin only after): killed and reaped."""
    process.kill()
    process.wait()
    if process.stdin is not None:
        process.stdin.close()


def _become(assignment: Assignment) -> None:
    os.setsid()  # its own session and group, as a cold process has, and a scheduling group of default weight
    os.environ.clear()
    os.environ.update(assignment.environment)
    log = os.open(assignment.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, LOG_FILE_MODE)
    devnull = os.open(os.devnull, os.O_RDONLY)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(devnull)
    sys.argv = [assignment.module, *assignment.args]
    runpy.run_module(assignment.module, run_name="__main__", alter_sys=True)


def import_at_low_priority(imports: Sequence[str]) -> None:
    """Import ``imports`` in a thread at ``IMPORT_NICE``; returns when done, raising what an import raised.
    Threads that a module starts as it is imported inherit that nice value: torch's start one that only idles
    afterwards, and its compute threads are started later by the thread that first computes."""

    def work() -> None:
        with contextlib.suppress(OSError):  # a system that refuses: the imports just compete as before
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), IMPORT_NICE)
        for name in imports:
            importlib.import_module(name)

    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="warm imports") as pool:
        pool.submit(work).result()  # an import's error is raised here, in the main thread, which exits on it


def main(ready_fd: int, imports: Sequence[str]) -> int:
    import_at_low_priority(imports)
    os.write(ready_fd, b"1")
    os.close(ready_fd)
    line = sys.stdin.buffer.readline()
    if not line.strip():
        return 0  # released before it was needed
    try:
        assignment = Assignment.model_validate(json.loads(line))
    except (ValueError, ValidationError) as exc:
        print(f"warm process: unreadable assignment ({exc})", file=sys.stderr)
        return 2
    _become(assignment)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(int(sys.argv[1]), sys.argv[2:]))
