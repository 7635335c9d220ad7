"""The OpenEnv server of a run: started by the environment process in its own (the OpenEnv) Python, on loopback.

``start_server(file, log)`` starts ``app_main`` on a free port, waits until ``/health`` answers and returns the
running server; a server that exits or never answers is one ``ServerError`` naming the file, the cause and the
log file with its last lines. ``ServerProcess.check_alive`` says the same for a server that died later
(``check_alive_after``: once it has had a moment to exit, for a session whose connection was just lost). A
``ServerError`` is an ``EnvironmentGone``: the run ends at once.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from hermes_nb.errors import EnvironmentGone

APP_MODULE = "hermes_nb.frameworks.openenv.app_main"
# openenv's import pulls gradio (~6 s on a quiet two-core machine); a loaded one takes several times that.
READY_TIMEOUT_S = 120.0
LOG_TAIL_LINES = 15
# How long a server whose connection was lost may take to be reported exited before it is taken for alive.
EXIT_GRACE_S = 2.0


class ServerError(EnvironmentGone):
    """The OpenEnv server could not start, or it died: no episode can be played, so the run ends at once."""


def log_tail(log: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.strip().splitlines()[-lines:]) or "(empty log)"


class ServerProcess:
    def __init__(self, file: str, process: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.file = file
        self.process = process
        self.url = url
        self.log = log

    def check_alive(self) -> None:
        """Raise ``ServerError`` with the log's tail when the server has exited."""
        code = self.process.poll()
        if code is not None:
            raise ServerError(
                f"the OpenEnv server of {self.file} exited (code {code}); its log {self.log} ends:\n"
                + log_tail(self.log)
            )

    async def check_alive_after(self, grace_s: float = EXIT_GRACE_S) -> None:
        """``check_alive`` once the server has had ``grace_s`` to exit: a server that dies closes its sockets a
        moment before the OS reports its exit."""
        deadline = time.monotonic() + grace_s
        while self.process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self.check_alive()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def start_server(file: str, log: Path, *, timeout_s: float = READY_TIMEOUT_S) -> ServerProcess:
    """The server of ``file``'s ``app``, answering ``/health``."""
    port = free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", APP_MODULE, file, "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=dict(os.environ),
        )  # fmt: skip
    server = ServerProcess(file, process, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=5.0) as client:
        while time.monotonic() < deadline:
            server.check_alive()
            try:
                if (await client.get(server.url + "/health")).status_code == 200:
                    return server
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    server.stop()
    raise ServerError(
        f"the OpenEnv server of {file} did not answer /health in {timeout_s:g} s; its log {log} ends:\n{log_tail(log)}"
    )
