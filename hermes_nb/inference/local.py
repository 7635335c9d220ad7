"""A temporary inference server for one model directory, in its own process group, always stopped afterwards.

``async with serve_model(model_dir, log_path) as url:`` starts the standalone server (``SERVER_MODULE``) on a free
loopback port, waits until ``/health`` answers 200 (the model is loaded), and on leaving, on an error or on
cancellation signals the whole process group: SIGTERM, then SIGKILL after a grace period
(``hermes_nb.system.processes``, which starts and ends a run's processes the same way).
Processes are started with ``subprocess`` (not ``asyncio`` subprocesses) so this works on any event loop,
including a notebook's re-entered one; waiting is done by polling, which costs nothing measurable.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from hermes_nb.errors import HermesNBError
from hermes_nb.protocol.auth import SECRET_ENV, capability_url
from hermes_nb.system.logtail import tail_lines
from hermes_nb.system.net import LOOPBACK, free_port
from hermes_nb.system.processes import (
    FAILURE_TAIL_LINES,
    child_environment,
    failure_message,
    spawn_group,
    stop_process_group,
)
from hermes_nb.system.secrets import SECRET_BYTES

# A process that ignored SIGTERM this long is killed: a CPU server stops within a batch (well under a second).
STOP_GRACE_S = 5.0
# Poll interval of health and exit checks: short against a model load of seconds, long against a syscall.
POLL_S = 0.1
# free_port() can race with another process taking the port before the server binds it; a new port fixes it.
PORT_ATTEMPTS = 3
PORT_IN_USE = "could not start on port"
# The standalone server's process: an entry point above this package (it also serves Tinker checkpoints), named
# once, here, where it is started.
SERVER_MODULE = "hermes_nb.processes.inference_server"


class ServerStartError(HermesNBError):
    """The inference server exited before it answered ``/health``; the message names the log with its tail."""


async def stop_child(proc: subprocess.Popen[bytes]) -> None:
    """End a child of a model test (this server, an environment) and everything it started."""
    await stop_process_group(proc, grace_seconds=STOP_GRACE_S, poll_seconds=POLL_S)


async def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    """``url`` carries the server's secret (a capability URL), so its ``/health`` answers only us."""
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


@dataclass(frozen=True)
class ServerSettings:
    """How the server runs its model: torch threads (None: torch's choice), and ``trainer.device`` /
    ``trainer.dtype`` settings (``hermes_nb.system.devices``)."""

    threads: int | None = 1
    device: str = "auto"
    dtype: str = "auto"


def _server_argv(model_dir: Path, port: int, settings: ServerSettings) -> list[str]:
    argv = [sys.executable, "-m", SERVER_MODULE, "--model", str(model_dir), "--host", LOOPBACK]
    argv += ["--port", str(port), "--device", settings.device, "--dtype", settings.dtype]
    return argv + (["--threads", str(settings.threads)] if settings.threads else [])


async def _start(
    model_dir: Path, log_path: Path, settings: ServerSettings, env: Mapping[str, str]
) -> tuple[subprocess.Popen[bytes], str]:
    """A healthy server and its URL, retrying on a fresh port when the chosen one was taken meanwhile."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = free_port()
        proc = spawn_group(_server_argv(model_dir, port, settings), log_path, env)
        url = capability_url(f"http://{LOOPBACK}:{port}", env.get(SECRET_ENV))
        try:
            await _wait_healthy(url, proc, log_path)
            return proc, url
        except ServerStartError:
            await stop_child(proc)
            taken = any(PORT_IN_USE in line for line in tail_lines(log_path, FAILURE_TAIL_LINES))
            if not taken or attempt == PORT_ATTEMPTS:
                raise
        except BaseException:
            await stop_child(proc)
            raise
    raise AssertionError("unreachable: the last attempt returns or raises")


@asynccontextmanager
async def serve_model(
    model_dir: Path, log_path: Path, *, threads: int | None = 1, device: str = "auto", dtype: str = "auto"
) -> AsyncIterator[str]:
    """Serve ``model_dir`` on 127.0.0.1 for the duration of the block; yields the server's root URL, a capability
    URL (``http://127.0.0.1:PORT/<secret>``): the server answers only requests that carry its fresh secret, so
    other local users cannot query it (``hermes_nb.protocol.auth``). ``device`` and ``dtype`` are
    ``trainer.device`` / ``trainer.dtype`` settings: by default the model runs on CUDA when there is one."""
    env = {**child_environment(threads), SECRET_ENV: secrets.token_urlsafe(SECRET_BYTES)}
    proc, url = await _start(model_dir, log_path, ServerSettings(threads, device, dtype), env)
    try:
        yield url
    finally:
        await stop_child(proc)
