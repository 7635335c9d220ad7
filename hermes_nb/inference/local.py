"""A temporary inference server for one model directory, in its own process group, always stopped afterwards.

``async with serve_model(model_dir, log_path) as url:`` starts ``python -m hermes_nb.inference`` on a free
loopback port, waits until ``/health`` answers 200 (the model is loaded), and on leaving, on an error or on
cancellation signals the whole process group: SIGTERM, then SIGKILL after a grace period.
Processes are started with ``subprocess`` (not ``asyncio`` subprocesses) so this works on any event loop,
including a notebook's re-entered one; waiting is done by polling, which costs nothing measurable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from hermes_nb.errors import HermesNBError
from hermes_nb.logtail import tail_lines
from hermes_nb.net import LOOPBACK, free_port
from hermes_nb.runs.processes import _die_with_parent, describe_exit, group_alive

# A process that ignored SIGTERM this long is killed: a CPU server stops within a batch (well under a second).
STOP_GRACE_S = 5.0
# Poll interval of health and exit checks: short against a model load of seconds, long against a syscall.
POLL_S = 0.1
# free_port() can race with another process taking the port before the server binds it; a new port fixes it.
PORT_ATTEMPTS = 3
PORT_IN_USE = "could not start on port"
LOG_TAIL_LINES = 8


class ServerStartError(HermesNBError):
    """The inference server exited before it answered ``/health``; the message names the log with its tail."""


def child_environment(threads: int | None = None) -> dict[str, str]:
    """This process's environment (keys stay out of argv) with thread caps for the child's native libraries."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"  # the tokenizers pool would compete for the same cores
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def spawn_group(argv: list[str], log_path: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session (so its own process group), stdout and stderr to ``log_path``.

    It receives SIGTERM if the thread that started it dies (Linux), so a killed kernel orphans nothing.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab", buffering=0) as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )


def failure_message(what: str, proc: subprocess.Popen[bytes], log_path: Path) -> str:
    code = proc.poll()
    state = describe_exit(code) if code is not None else "did not finish"
    tail = "\n".join(tail_lines(log_path, LOG_TAIL_LINES))
    return f"{what} {state}; last lines of {log_path}:\n{tail}" if tail else f"{what} {state} (log {log_path} is empty)"


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return


async def stop_process_group(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the group of ``proc`` (started with its own session), SIGKILL what is left after ``grace_s``.

    The kill and the reap also happen when this wait is itself cancelled, so nothing outlives its caller.
    """
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        deadline = time.monotonic() + grace_s
        while group_alive(proc.pid) and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
    finally:
        if group_alive(proc.pid):
            _signal_group(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)  # reaps the zombie; immediate after SIGKILL


async def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    async with httpx.AsyncClient(timeout=POLL_S * 20) as client:
        while True:
            if proc.poll() is not None:
                raise ServerStartError(failure_message("the inference server", proc, log_path))
            try:
                if (await client.get(url + "/health")).status_code == 200:
                    return
            except httpx.TransportError:
                pass  # not listening yet
            await asyncio.sleep(POLL_S)


def _server_argv(model_dir: Path, port: int, threads: int | None) -> list[str]:
    argv = [sys.executable, "-m", "hermes_nb.inference", "--model", str(model_dir), "--host", LOOPBACK]
    argv += ["--port", str(port)]
    return argv + (["--threads", str(threads)] if threads else [])


async def _start(
    model_dir: Path, log_path: Path, threads: int | None, env: Mapping[str, str]
) -> tuple[subprocess.Popen[bytes], str]:
    """A healthy server and its URL, retrying on a fresh port when the chosen one was taken meanwhile."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = free_port()
        proc = spawn_group(_server_argv(model_dir, port, threads), log_path, env)
        url = f"http://{LOOPBACK}:{port}"
        try:
            await _wait_healthy(url, proc, log_path)
            return proc, url
        except ServerStartError:
            await stop_process_group(proc)
            taken = any(PORT_IN_USE in line for line in tail_lines(log_path, LOG_TAIL_LINES))
            if not taken or attempt == PORT_ATTEMPTS:
                raise
        except BaseException:
            await stop_process_group(proc)
            raise
    raise AssertionError("unreachable: the last attempt returns or raises")


@asynccontextmanager
async def serve_model(model_dir: Path, log_path: Path, *, threads: int | None = 1) -> AsyncIterator[str]:
    """Serve ``model_dir`` on 127.0.0.1 for the duration of the block; yields the server's root URL."""
    proc, url = await _start(model_dir, log_path, threads, child_environment(threads))
    try:
        yield url
    finally:
        await stop_process_group(proc)
