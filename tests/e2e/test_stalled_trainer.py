"""A real run whose trainer is stopped (SIGSTOP) while its environment keeps producing: the trajectory API's queue
stays within the run's cap, its memory stays flat, and once the trainer continues (SIGCONT) the run completes.

The environment (tests/fixtures/stall/firehose_env.py) makes groups without sampling, as one with its own
inference would, so only back-pressure stops it. Its own limit (env.max_batches_offpolicy) is set far above the
cap, so what holds the queue is the cap: the room the API reports in /status-env, and its 503 beyond it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psutil
import pytest
from run_helpers import REPO_ROOT, run, run_pids, wait_for_status

from hermes_nb.api import rl_load_config, rl_select_environment, rl_start_training, rl_stop_training
from hermes_nb.protocol.auth import bearer_headers
from hermes_nb.protocol.run_state import read_run_state
from hermes_nb.protocol.trajectory import HealthResponse
from hermes_nb.runs.run_dirs import known_run_ids
from hermes_nb.system import home
from hermes_nb.system.home import run_paths
from hermes_nb.system.secrets import read_run_secret

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "stall"
GROUP, BATCH, CAP_BATCHES = 4, 16, 2
CAP = CAP_BATCHES * BATCH
STALL_S = 20.0
TIMEOUT = 180.0
# The API's resident memory may move by allocator noise while the queue is full, not by what it holds:
# the cap is 32 sequences of 16 tokens, a few kilobytes.
RSS_SLACK_MIB = 8.0


@pytest.fixture
def firehose(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(home.ENV_PATH_VAR, str(FIXTURES))
    run(rl_select_environment("firehose"))
    run(rl_load_config(REPO_ROOT / "configs" / "quick_test.yaml"))
    yield
    for run_id in known_run_ids():
        run(rl_stop_training(run_id))


def api_health(run_id: str) -> HealthResponse:
    port = read_run_state(home.run_dir(run_id)).api_port
    headers = bearer_headers(read_run_secret(home.run_dir(run_id)))
    answer = httpx.get(f"http://127.0.0.1:{port}/health", headers=headers, timeout=5)
    return HealthResponse.model_validate(answer.raise_for_status().json())


# pytest-timeout (300 s in pyproject) must not cut the named waits short: two run waits and the stall, in full.
@pytest.mark.timeout(2 * TIMEOUT + STALL_S + 60)
def test_a_stopped_trainer_leaves_the_queue_within_its_cap_and_the_run_completes_after_sigcont(
    firehose: None,
) -> None:
    settings: dict[str, Any] = {
        "group_size": GROUP,
        "batch_size": BATCH,
        "max_batches_offpolicy": 50,
        "steps_per_eval": 0,
        "trainer.max_queued_batches": CAP_BATCHES,
        "trainer.save_checkpoint_interval": 0,
        "wandb.mode": "disabled",
    }
    start = run(rl_start_training(total_steps=8, **settings))
    wait_for_status(start.run_id, lambda s: s.step >= 2, TIMEOUT)
    pids = run_pids(start.run_id)
    api = psutil.Process(pids["api"])

    os.kill(pids["trainer"], signal.SIGSTOP)
    try:
        held, rss, steps = sample_stall(start.run_id, api)
    finally:
        os.kill(pids["trainer"], signal.SIGCONT)

    assert max(held) <= CAP, held
    assert max(held) >= CAP - GROUP, held  # the environment kept producing until the cap held it
    assert len(set(steps)) == 1  # the trainer really was stopped
    full_at = next(i for i, n in enumerate(held) if n >= CAP - GROUP)
    assert max(rss[full_at:]) - rss[full_at] <= RSS_SLACK_MIB, rss
    done = wait_for_status(start.run_id, lambda s: s.is_terminal, TIMEOUT)
    assert (done.status, done.step) == ("completed", 8), done
    api_log = run_paths(start.run_id).logs["api"].read_text()
    assert "Traceback" not in api_log


def sample_stall(run_id: str, api: psutil.Process) -> tuple[list[int], list[float], list[int]]:
    """Every half second of the stall: sequences held by the API, its RSS (MiB) and the trainer's step."""
    held: list[int] = []
    rss: list[float] = []
    steps: list[int] = []
    deadline = time.monotonic() + STALL_S
    while time.monotonic() < deadline:
        health = api_health(run_id)
        assert health.max_queued_sequences == CAP
        held.append(health.held_sequences)
        steps.append(health.current_step)
        rss.append(api.memory_info().rss / 2**20)
        time.sleep(0.5)
    return held, rss, steps
