"""The ``hermes-nb`` command line against real runs: ``start`` launches a real (short) run whose ``status`` reads
through to ``completed``, and ``test`` samples the embedded model on a shipped environment for real. Each call is
its own process, as a user at a shell makes it; they share this test's home (``HERMES_NB_HOME``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest
from run_helpers import QUICK_TEST_CONFIG, REPO_ROOT, finite

pytestmark = pytest.mark.e2e

# A call that only reads or writes the session's files, or starts a run and returns: imports take seconds on two
# busy cores.
CALL_TIMEOUT_S = 120.0
# A quick-test run of a few steps completes in well under a minute here.
COMPLETE_TIMEOUT_S = 180.0
STEPS = 3
POLL_S = 1.0


def cli(*args: str, timeout: float = CALL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """``python -m hermes_nb.cli ARGS`` with this tree's package first on the path."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    argv = [sys.executable, "-m", "hermes_nb.cli", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=timeout, check=False)


def cli_json(*args: str, timeout: float = CALL_TIMEOUT_S) -> Any:
    done = cli(*args, "--json", timeout=timeout)
    assert done.returncode == 0, f"hermes-nb {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
    return json.loads(done.stdout)


def status_until_terminal(run_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    status = cli_json("status", run_id)
    while status["status"] not in ("completed", "failed", "stopped"):
        assert time.monotonic() < deadline, f"hermes-nb status: not terminal after {timeout:.0f} s: {status}"
        time.sleep(POLL_S)
        status = cli_json("status", run_id)
    return status


@pytest.fixture
def arithmetic_quick() -> None:
    for args in (("select", "arithmetic"), ("load", str(QUICK_TEST_CONFIG))):
        done = cli(*args)
        assert done.returncode == 0, f"hermes-nb {' '.join(args)}: {done.stderr}"


@pytest.mark.timeout(CALL_TIMEOUT_S + COMPLETE_TIMEOUT_S + 3 * CALL_TIMEOUT_S)
def test_cli_start_runs_a_real_run_whose_status_reads_completed(arithmetic_quick: None) -> None:
    started = cli("start", f"total_steps={STEPS}", "steps_per_eval=0")
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.strip()  # the id alone on stdout, for RUN=$(hermes-nb start)

    status = status_until_terminal(run_id, COMPLETE_TIMEOUT_S)

    assert status["status"] == "completed", status
    assert (status["step"], status["total_steps"]) == (STEPS, STEPS)
    assert finite(status["metrics"]["loss"]) and finite(status["metrics"]["reward_mean"]), status["metrics"]
    listed = cli_json("runs")
    assert run_id in json.dumps(listed)


@pytest.mark.timeout(3 * CALL_TIMEOUT_S + 60)
def test_cli_test_samples_the_embedded_model_on_a_shipped_environment(arithmetic_quick: None) -> None:
    report = cli_json("test", "--models", "embedded", "--steps", "2", "--group-size", "4", timeout=2 * CALL_TIMEOUT_S)

    [model] = report["models_tested"]
    assert report["summary"]["environment_works"] and report["successful_models"] == 1, report
    assert (model["model"], model["steps_tested"]) == ("embedded", 2), model
    assert report["test_config"]["rollouts_per_model"] == 8
