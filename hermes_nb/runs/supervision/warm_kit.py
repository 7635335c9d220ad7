"""A warm kit: a detached process that becomes the supervisor of a kernel's next run, with that run's three
processes already started and their imports done (``hermes_nb.system.warm_process``).

    python -m hermes_nb.runs.supervision.warm_kit --detach FD READY_FD LOG

The kernel makes kits when an environment is selected and around each run it starts (``runs.supervision.warm_start``
says when): a kit imports the supervisor and starts a warm API, trainer and environment process, writes a byte to
``READY_FD`` once all three have imported (the kernel's ``warm_start.wait_until_ready``), and blocks on ``FD``, the
read end of a pipe the kernel holds. A line there is the hand-over (the next run's id, the kernel's environment and
working directory at that moment): the kit becomes that run's supervisor (``runs.supervision.supervisor``) and its warm
processes become the run's, each told its command line (until then their output, and the kit's, goes to ``LOG``).
The end of the pipe (the kernel ended or closed it) or ``IDLE_TIMEOUT_S`` without a hand-over ends the kit and its
warm processes. While it waits it uses no CPU. Its processes import at the lowest priority, beside any run that
is training. A hand-over that comes while one of them still imports is waited for, at the default priority again:
what it has imported is a head start on what a cold process would import, so it is never later (a stop followed at
once by a start finds its kit importing). Only one that has not imported within ``HAND_OVER_IMPORT_WAIT_S`` starts
cold instead.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from pathlib import Path

from pydantic import BaseModel

# Stays below the floor of what it launches until warm: the kernel waits for this process to detach.
from hermes_nb.system import processes

KIT_MODULE = "hermes_nb.runs.supervision.warm_kit"
# A warm kit holds about 0.5 GB (torch and transformers imported in its trainer); after half an hour without a
# run it is more likely forgotten than about to be used.
IDLE_TIMEOUT_S = 1800.0
IDLE_TIMEOUT_VAR = "HERMES_NB_WARM_IDLE_S"
# What the kit's log says once it has started its warm processes, with its pid and theirs, as READY_LINE.
STARTED_LINE = "warm kit importing, pid"
# A warm process's imports take at most a cold start's (they began earlier, and are the same); the bound is for one
# stalled, which then starts cold.
HAND_OVER_IMPORT_WAIT_S = 120.0
# What the kit's log says once every warm process has imported, with its pid and its warm processes'
# ("api 12, trainer 13, env 14").
READY_LINE = "warm kit ready, pid"
# The end of a hand-over message: the kernel writes one line.
MAX_HAND_OVER_BYTES = 4 * 1024 * 1024

# What each process of a run imports before it can start (the modules of its command and what they import on the
# way to the first step: transformers imports a model's code when a model is first loaded, 6 of the 7 s a cold
# trainer spends loading the embedded model on two busy cores); anything else it imports after the hand-over, as a
# cold start would.
ROLE_IMPORTS: dict[str, tuple[str, ...]] = {
    "api": ("hermes_nb.trajectory_api.server", "uvicorn", "fastapi"),
    "trainer": (
        "torch",
        "transformers",
        "transformers.modeling_utils",
        "transformers.tokenization_utils_base",
        "transformers.models.auto.modeling_auto",
        "transformers.models.auto.tokenization_auto",
        "transformers.models.llama.modeling_llama",  # the embedded model's architecture
        "transformers.models.qwen3.modeling_qwen3",  # the embedded chat model's
        "hermes_nb.backends",
        "hermes_nb.trainer.run.main",
        "hermes_nb.trainer.run.loop",
        "hermes_nb.trainer.local.local_backend",
        "hermes_nb.inference.server",
        "hermes_nb.metrics.logger",
        "hermes_nb.trajectory_api.client",
    ),
    "env": (
        "hermes_nb.env_host.cli",
        "hermes_nb.env_host.loading",
        "hermes_nb.env.qa",
        "hermes_nb.env.agent",
        "hermes_nb.env.chat_render",
        "hermes_nb.env.inference_client",
    ),
}


class HandOver(BaseModel):
    """What the kernel tells a warm kit: the run to supervise, and the kernel's environment and working directory
    when it asked (what a cold supervisor would have inherited)."""

    run_id: str
    environment: dict[str, str]
    cwd: str


def _idle_timeout() -> float:
    return float(os.environ.get(IDLE_TIMEOUT_VAR, IDLE_TIMEOUT_S))


def _read_line(fd: int) -> bytes:
    data = b""
    while not data.endswith(b"\n") and len(data) < MAX_HAND_OVER_BYTES:
        chunk = os.read(fd, 65536)
        if not chunk:
            return b""  # the kernel closed the pipe without a whole message: nothing to do
        data += chunk
    return data


def _log_to(log_path: Path) -> None:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, processes.LOG_FILE_MODE)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)


def _spawn_warm_processes(log_path: Path) -> tuple[dict[str, subprocess.Popen[bytes]], dict[str, int]]:
    """One warm process per role, and by role the read end of the pipe each says it has imported on."""
    from hermes_nb.system.warm_process import spawn_warm

    environment = processes.child_environment()
    warm, ready = {}, {}
    for role, imports in ROLE_IMPORTS.items():
        read_end, write_end = os.pipe()
        warm[role] = spawn_warm(imports, log_path, environment, write_end)
        os.close(write_end)
        ready[role] = read_end
    return warm, ready


def _wait_for_kernel(fd: int, ready_fd: int, importing: dict[str, int], ready_line: str) -> tuple[set[str], bool]:
    """Wait for the kernel's hand-over while the warm processes import (their pipes in ``importing``, by role, which
    this empties as they answer). Once every one has imported or ended, the kernel is told and the log reads
    ``ready_line``. The wait ends when ``fd`` has something (a hand-over, or its end), or ``IDLE_TIMEOUT_S`` after the
    kernel was told. Returns the roles imported, and whether the kernel spoke."""
    imported: set[str] = set()
    idle_until: float | None = None
    while True:
        if not importing and idle_until is None:
            print(ready_line, file=sys.stderr, flush=True)
            with contextlib.suppress(OSError):  # the kernel may have stopped listening: it is only told
                os.write(ready_fd, b"1")
            idle_until = time.monotonic() + _idle_timeout()
        timeout = None if idle_until is None else max(0.0, idle_until - time.monotonic())
        readable, _, _ = select.select([fd, *importing.values()], [], [], timeout)
        if fd in readable:
            return imported, True
        if not readable:
            return imported, False
        imported |= _answered(importing, readable)


def _answered(importing: dict[str, int], readable: list[int]) -> set[str]:
    """Take the warm processes that answered on ``readable`` out of ``importing``; the roles that imported."""
    imported = set()
    for role, read_end in list(importing.items()):
        if read_end in readable:
            if os.read(read_end, 1) == b"1":  # an end of file instead: it failed, its log says why
                imported.add(role)
            os.close(read_end)
            del importing[role]
    return imported


def _finish_imports(importing: dict[str, int], timeout: float) -> set[str]:
    """Wait up to ``timeout`` for the warm processes still importing; the roles that imported."""
    imported: set[str] = set()
    deadline = time.monotonic() + timeout
    while importing and time.monotonic() < deadline:
        readable, _, _ = select.select(list(importing.values()), [], [], max(0.0, deadline - time.monotonic()))
        imported |= _answered(importing, readable)
    for read_end in importing.values():
        os.close(read_end)
    importing.clear()
    return imported


def _end_unused(warm: dict[str, subprocess.Popen[bytes]], imported: set[str]) -> None:
    """No run came: the imported processes are released, those still importing (they read nothing until done) ended."""
    from hermes_nb.system.warm_process import end_now, release

    for role, process in warm.items():
        (release if role in imported else end_now)(process)


def serve(fd: int, ready_fd: int, log_path: Path) -> int:
    from hermes_nb.runs.supervision import supervisor
    from hermes_nb.system.home import run_paths
    from hermes_nb.system.warm_process import end_now, lower_session_priority, restore_session_priority

    lower_session_priority()  # until the hand-over: this process, and the warm processes it starts
    warm, importing = _spawn_warm_processes(log_path)
    pids = f"{os.getpid()}: " + ", ".join(f"{role} {process.pid}" for role, process in warm.items())
    print(f"{STARTED_LINE} {pids}", file=sys.stderr, flush=True)
    imported, spoke = _wait_for_kernel(fd, ready_fd, importing, f"{READY_LINE} {pids}")
    os.close(ready_fd)
    line = _read_line(fd) if spoke else b""
    os.close(fd)
    if not line.strip():
        _end_unused(warm, imported | _finish_imports(importing, 0.0))
        return 0
    if importing:
        restore_session_priority()  # the run's processes finish their imports at a cold start's priority
        print(
            f"warm kit: handed a run while {', '.join(sorted(importing))} import; waiting", file=sys.stderr, flush=True
        )
        imported |= _finish_imports(importing, HAND_OVER_IMPORT_WAIT_S)
    for role in set(warm) - imported:
        print(f"warm kit: the {role} process did not import; it starts cold", file=sys.stderr, flush=True)
        end_now(warm.pop(role))
    hand_over = HandOver.model_validate_json(line)
    os.setsid()  # a session of its own, out of the low-priority one, as a cold supervisor's
    os.environ.clear()
    os.environ.update(hand_over.environment)
    os.chdir(hand_over.cwd)
    _log_to(run_paths(hand_over.run_id).logs["supervisor"])
    return supervisor.main([hand_over.run_id], warm=warm)


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[0] != "--detach":
        print("usage: python -m hermes_nb.runs.supervision.warm_kit --detach FD READY_FD LOG", file=sys.stderr)
        return 2
    fd, ready_fd, log_path = int(argv[1]), int(argv[2]), Path(argv[3])
    return processes.run_detached(lambda: serve(fd, ready_fd, log_path))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
