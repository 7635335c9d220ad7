"""Trajectory APIs a test starts itself, as a user would start one that runs train from
(``trainer.external_api_url``): hermes-nb's own, and atroposlib's ``run-api`` from the atropos side environment.

Both listen on a free loopback port and are waited for on ``/status`` (``run-api`` has no ``/health``). The
context manager yields the URL and the process, and ends the process (SIGTERM, then SIGKILL) on the way out.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from side_envs import REPO_ROOT, side_env_python

from hermes_nb.system.net import LOOPBACK, free_port

# Importing FastAPI and atroposlib takes a few seconds; much more on two busy cores.
START_TIMEOUT_S = 60.0


def run_api_command(port: int) -> list[str]:
    """atroposlib's ``run-api`` console script, from the atropos side environment (skips or fails the test when
    that environment is not built; see ``side_envs``)."""
    run_api = side_env_python("atropos").parent / "run-api"
    return [str(run_api), "--host", LOOPBACK, "--port", str(port)]


def hermes_api_command(port: int) -> list[str]:
    return [sys.executable, "-m", "hermes_nb.trajectory_api", "--host", LOOPBACK, "--port", str(port)]


@contextmanager
def api_process(kind: str, log_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``kind`` is ``"hermes"`` or ``"atropos"``."""
    port = free_port()
    argv = run_api_command(port) if kind == "atropos" else hermes_api_command(port)
    url = f"http://{LOOPBACK}:{port}"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_for_status(url, proc, log_path)
            yield url, proc
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_for_status(url: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the API exited {proc.returncode}: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/status", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url}: no answer on /status after {START_TIMEOUT_S:.0f} s: {log_path.read_text()[-2000:]}")
