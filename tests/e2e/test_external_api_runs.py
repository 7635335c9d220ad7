"""Runs that train from a trajectory API they did not start (``trainer.external_api_url``): hermes-nb's own API
started by the test, and atroposlib's ``run-api`` from the atropos side environment. The run's own (native)
environment feeds it; the run starts no API process and never signals the external one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from external_apis import START_TIMEOUT_S, api_process
from run_helpers import finite, run, run_pids, wait_for_status

from hermes_nb.api import rl_start_training, rl_stop_training
from hermes_nb.config import RunConfig
from hermes_nb.protocol.auth import SECRET_ENV
from hermes_nb.system.home import run_paths
from hermes_nb.system.secrets import read_run_secret
from hermes_nb.trajectory_api import SyncTrajectoryClient

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("quick_env")]

STEPS = 4
COMPLETE_TIMEOUT = 180.0
LONG_RUN = 500
# The trainer's next request fails at once; the supervisor's probes fail the run after 10 s at most.
FAILURE_TIMEOUT = 30.0


def start_from(url: str, total_steps: int) -> str:
    return run(rl_start_training(**{"trainer.external_api_url": url, "total_steps": total_steps})).run_id


@pytest.mark.parametrize("kind", ["hermes", "atropos"])
def test_a_run_trains_from_an_external_api_to_completed_and_leaves_it_running(kind: str, tmp_path: Path) -> None:
    with api_process(kind, tmp_path / "api.log") as (url, api):
        run_id = start_from(url, STEPS)

        status = wait_for_status(run_id, lambda s: s.is_terminal, COMPLETE_TIMEOUT)

        assert status.status == "completed", status.error
        assert status.step == STEPS and finite(status.metrics.loss)
        assert "api" not in run_pids(run_id)
        assert api.poll() is None
        with SyncTrajectoryClient(url) as client:
            # A run-api forms every batch its queue allows at once, so its step may run ahead of the trainer's.
            assert client.status().current_step >= STEPS


# The API's start, two run waits and the environment's exit, in full: above pytest-timeout's 300 s default.
@pytest.mark.timeout(START_TIMEOUT_S + 2 * COMPLETE_TIMEOUT + 60 + 60)
def test_a_run_that_starts_no_environment_trains_from_one_started_elsewhere(tmp_path: Path) -> None:
    with api_process("hermes", tmp_path / "api.log") as (url, _):
        overrides = {"trainer.external_api_url": url, "trainer.start_environment": False, "total_steps": STEPS}
        run_id = run(rl_start_training(**overrides)).run_id
        wait_for_status(run_id, lambda s: s.status == "running", COMPLETE_TIMEOUT)
        assert set(run_pids(run_id)) == {"supervisor", "trainer"}
        # Started by hand, as a user would start one elsewhere: the run's config says where the API and the
        # inference server are, and the run's secret (its owner can read it) opens the inference server.
        paths = run_paths(run_id)
        env_ref = RunConfig.load(paths.config).environment
        assert env_ref is not None
        argv = [sys.executable, "-m", "hermes_nb.env_host", "serve", f"{env_ref.file}:{env_ref.class_name}"]
        secret = {SECRET_ENV: read_run_secret(paths.run_dir) or ""}
        with (tmp_path / "env.log").open("wb") as log:
            env = subprocess.Popen(
                [*argv, "--config", str(paths.config)], stdout=log, stderr=subprocess.STDOUT, env=os.environ | secret
            )
            try:
                status = wait_for_status(run_id, lambda s: s.is_terminal, COMPLETE_TIMEOUT)
                env.wait(60)
            finally:
                env.kill()

    assert status.status == "completed", status.error
    assert status.step == STEPS and env.returncode == 0


def test_stopping_a_run_leaves_its_external_api_running_and_answering(tmp_path: Path) -> None:
    with api_process("hermes", tmp_path / "api.log") as (url, api):
        run_id = start_from(url, LONG_RUN)
        wait_for_status(run_id, lambda s: s.step >= 1, COMPLETE_TIMEOUT)

        stopped = run(rl_stop_training(run_id))

        assert stopped.status == "stopped"
        assert api.poll() is None
        with SyncTrajectoryClient(url) as client:
            assert client.readiness().trainer_registered


def test_an_external_api_that_goes_away_fails_the_run_naming_it(tmp_path: Path) -> None:
    with api_process("hermes", tmp_path / "api.log") as (url, api):
        run_id = start_from(url, LONG_RUN)
        wait_for_status(run_id, lambda s: s.step >= 1, COMPLETE_TIMEOUT)

        api.send_signal(signal.SIGKILL)
        status = wait_for_status(run_id, lambda s: s.is_terminal, FAILURE_TIMEOUT)

    assert status.status == "failed" and status.failed_process == "api"
    assert status.error is not None and f"(external, {url}) went away" in status.error
