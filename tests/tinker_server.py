"""A self-hosted Tinker API server for tests: SkyRL tx (``skyrl.tinker.api``, JAX on CPU) from the ``skyrl`` side
environment, on 127.0.0.1 and a free port, with a local model directory as its base model.

How SkyRL 0.3.0 starts, read from its source: ``python -m skyrl.tinker.api`` reads its *parent's* command line,
expects ``uv run <uv flags> -m skyrl.tinker.api ...`` there, and starts its engine as
``uv run <those uv flags> --extra tinker --extra <backend> -m skyrl.tinker.engine ...``. So the API runs under
``uv run --no-project --python <side env python>`` (uv is in the side environment and first on PATH): the engine
then starts in the same interpreter, no project is resolved and nothing is installed (uv warns that ``--extra`` has
no effect without a project). The working directory is the server's own temporary folder, so uv never sees
hermes-nb's pyproject.toml. ``--database-url`` and ``--checkpoints-base`` keep the server's sqlite database and
checkpoints in that folder too (the defaults are inside site-packages and /tmp). The server checks no key; the SDK
wants one that starts with ``tml-`` (``FAKE_KEY``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from side_envs import side_env_python

from hermes_nb.system.net import free_port

FAKE_KEY = "tml-hermes-nb-test"
# Adapters the server keeps at once: each test run is one LoRA client, a resumed run another, a sampler session too.
MAX_LORA_ADAPTERS = 16
MAX_LORA_RANK = 8
# JAX compiles once per input shape (5-60 s each on a busy CPU). SkyRL pads sequence lengths to buckets; fixing
# the batch dimension too (training one sequence per micro-batch, sampling in batches padded to 16 rows) leaves
# one compilation per length bucket, instead of one per distinct batch size, which varies every step. 16 rows: a
# quick-test batch (4 prompts x 4), so a padded batch costs little more than the rows it carries.
TRAIN_MICRO_BATCH = 1
SAMPLE_BATCH = 16
# The API answers /healthz within seconds; the engine loads the model (14-27 s measured) while requests queue.
START_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0


@dataclass
class SkyrlServer:
    url: str
    base_model: str
    process: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace") if self.log.is_file() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM to the whole process group (uv, the API, the engine), SIGKILL after a grace."""
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(STOP_GRACE_S)
        _kill_group_leftovers(self.process.pid)


def _kill_group_leftovers(group: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def server_argv(python: Path, base_model: str, workdir: Path, port: int) -> list[str]:
    uv = python.parent / "uv"
    backend_config = {
        "max_lora_rank": MAX_LORA_RANK,
        "max_lora_adapters": MAX_LORA_ADAPTERS,
        "train_micro_batch_size": TRAIN_MICRO_BATCH,
        "sample_max_num_sequences": SAMPLE_BATCH,
    }
    return [
        str(uv), "run", "--no-project", "--python", str(python),
        "-m", "skyrl.tinker.api",
        "--base-model", base_model,
        "--backend", "jax",
        "--backend-config", json.dumps(backend_config),
        "--database-url", f"sqlite:///{workdir / 'tinker.db'}",
        "--checkpoints-base", str(workdir / "checkpoints"),
        "--host", "127.0.0.1",
        "--port", str(port),
    ]  # fmt: skip


def server_environment(python: Path, workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env["UV_CACHE_DIR"] = str(workdir / "uv-cache")
    env["UV_NO_CONFIG"] = "1"
    env["UV_OFFLINE"] = "1"  # nothing to fetch: the interpreter and its packages are all there
    env["JAX_PLATFORMS"] = "cpu"
    env["HF_HUB_OFFLINE"] = "1"
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "TINKER_API_KEY"):
        env.pop(name, None)
    return env


def start_skyrl_server(base_model: Path, workdir: Path) -> SkyrlServer:
    """Start the server and return once ``/api/v1/healthz`` answers; the caller must ``stop()`` it."""
    python = side_env_python("skyrl")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = workdir / "skyrl.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            server_argv(python, str(base_model), workdir, port),
            cwd=workdir,
            env=server_environment(python, workdir),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = SkyrlServer(url=f"http://127.0.0.1:{port}", base_model=str(base_model), process=process, log=log)
    try:
        _wait_healthy(server)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_healthy(server: SkyrlServer) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"SkyRL server exited ({server.process.returncode}):\n{server.log_tail()}")
        try:
            if httpx.get(f"{server.url}/api/v1/healthz", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)  # readiness poll of a starting server
    raise RuntimeError(f"SkyRL server not healthy within {START_TIMEOUT_S:.0f} s:\n{server.log_tail()}")
