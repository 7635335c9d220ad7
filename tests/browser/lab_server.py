"""A real JupyterLab on 127.0.0.1 for the browser test: its own port, token, home and Jupyter dirs, no network.

Everything Jupyter writes (config, data, runtime files, lab settings and workspaces) goes under one temporary
folder, and the notebooks live in a temporary work dir, so the test neither reads nor changes the user's set-up.
JupyterLab fetches nothing: news and update checks are off (server flags and the notification settings) and the
extension manager is read-only (the default one queries PyPI). The same server serves Jupyter Notebook 7's pages
(``/notebooks/...``: the notebook package's server extension, enabled when it is installed).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
from notebook_page import JUPYTERLAB

from hermes_nb.system.net import LOOPBACK, free_port

# A cold JupyterLab on two shared cores takes 5-15 s to answer; a minute means something is wrong.
READY_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.2
# A kernel or the server that ignores a polite stop this long is killed (and the test says so).
STOP_TIMEOUT_S = 20.0
LOG_TAIL_CHARS = 3000

# Front-end settings, by plugin: no "get news?" prompt, no fetched news, no update check; and a notebook starts
# its kernelspec's kernel by itself (otherwise JupyterLab sometimes asks "Select Kernel" in a modal dialog).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker": {"autoStartDefaultKernel": True},
}


@dataclass
class JupyterLabServer:
    root: Path  # the notebooks' folder (JupyterLab's root dir and the kernels' cwd)
    url: str
    token: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def api(self, method: str, path: str, body: Any = None) -> Any:
        response = httpx.request(method, f"{self.url}{path}", headers=self.headers, json=body, timeout=30.0)
        response.raise_for_status()
        return response.json() if response.content else None

    def kernel_attached(self) -> bool:
        """Whether a kernel is idle with a page's websocket on it: the server's view, whatever the page shows."""
        return any(
            kernel["execution_state"] == "idle" and kernel["connections"] > 0
            for kernel in self.api("GET", "/api/kernels")
        )

    def lab_url(self, notebook: str) -> str:
        return JUPYTERLAB.url(self.url, notebook, self.token)

    def log_tail(self) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text[-LOG_TAIL_CHARS:]

    def create_notebook(self, name: str, cells: list[str]) -> None:
        """Write ``name`` through the REST contents API, one code cell per source, with the python3 kernel."""
        content = {
            "cells": [
                {
                    "cell_type": "code",
                    "id": f"cell-{i}",
                    "metadata": {},
                    "source": src,
                    "outputs": [],
                    "execution_count": None,
                }
                for i, src in enumerate(cells)
            ],
            "metadata": {
                "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
                "language_info": {"name": "python"},
            },
            "nbformat": 4,
            "nbformat_minor": 5,
        }
        self.api("PUT", f"/api/contents/{name}", {"type": "notebook", "format": "json", "content": content})

    def stop(self) -> list[str]:
        """Shut every kernel and the server down; return what had to be killed or is still alive (empty: clean)."""
        family = _family(self.process.pid)
        problems: list[str] = []
        if self.process.poll() is None:
            self._polite_shutdown()
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            problems.append(f"jupyter server {self.process.pid} ignored the shutdown; killed")
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)
        _, alive = psutil.wait_procs(family, timeout=STOP_TIMEOUT_S)
        for proc in alive:
            problems.append(f"process {proc.pid} ({_describe(proc)}) outlived the server; killed")
            _kill(proc)
        return problems

    def _polite_shutdown(self) -> None:
        try:
            for kernel in self.api("GET", "/api/kernels"):
                self.api("DELETE", f"/api/kernels/{kernel['id']}")
            self.api("POST", "/api/shutdown")
        except httpx.HTTPError:
            self.process.send_signal(signal.SIGTERM)  # the REST route failed: the server's own SIGTERM path


def start_jupyterlab(base: Path, env: dict[str, str]) -> JupyterLabServer:
    """Start JupyterLab with every Jupyter dir under ``base`` and wait until its REST API answers."""
    root = base / "work"
    root.mkdir(parents=True)
    token = secrets.token_hex(16)
    port = free_port()
    log_path = base / "jupyterlab.log"
    server_env = {**env, **_jupyter_dirs(base), "JUPYTER_TOKEN": token}  # the token stays off the command line
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.ip={LOOPBACK}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.open_browser=False",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
    ]
    if os.geteuid() == 0:
        command.append("--ServerApp.allow_root=True")  # CI containers run as root; Jupyter refuses that by default
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=root, env=server_env, stdout=log, stderr=subprocess.STDOUT)
    server = JupyterLabServer(root, f"http://{LOOPBACK}:{port}", token, process, log_path)
    try:
        _wait_ready(server)
    except BaseException:
        server.stop()
        raise
    return server


def _jupyter_dirs(base: Path) -> dict[str, str]:
    dirs = {
        "HOME": base / "home",
        "JUPYTER_CONFIG_DIR": base / "jupyter" / "config",
        "JUPYTER_DATA_DIR": base / "jupyter" / "data",
        "JUPYTER_RUNTIME_DIR": base / "jupyter" / "runtime",
        "JUPYTERLAB_SETTINGS_DIR": base / "jupyter" / "lab-settings",
        "JUPYTERLAB_WORKSPACES_DIR": base / "jupyter" / "lab-workspaces",
        "IPYTHONDIR": base / "ipython",
        "MPLCONFIGDIR": base / "matplotlib",
    }
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    for plugin, values in LAB_SETTINGS.items():
        path = dirs["JUPYTERLAB_SETTINGS_DIR"] / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    return {name: str(path) for name, path in dirs.items()}


def _wait_ready(server: JupyterLabServer) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with {server.process.returncode}:\n{server.log_tail()}")
        try:
            server.api("GET", "/api/status")
            return
        except httpx.HTTPError as exc:
            last_error = str(exc)
        time.sleep(POLL_INTERVAL_S)
    raise RuntimeError(f"JupyterLab did not answer in {READY_TIMEOUT_S:.0f} s ({last_error}):\n{server.log_tail()}")


def _family(pid: int) -> list[psutil.Process]:
    try:
        parent = psutil.Process(pid)
        return [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _describe(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline()[:4])
    except psutil.Error:
        return "?"


def _kill(proc: psutil.Process) -> None:
    try:
        proc.kill()
    except psutil.NoSuchProcess:
        return
