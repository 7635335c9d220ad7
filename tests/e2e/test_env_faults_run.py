"""Environment faults in real runs (supervisor, trajectory API, trainer on the shipped model, environment):
skipped and counted while the run goes on, and a streak that fails the run with the environment's own error.
The environment is tests/fixtures/faults/fault_env.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from run_helpers import QUICK_TEST_CONFIG, REPO_ROOT, run, wait_for_status

from hermes_nb.api import rl_load_config, rl_select_environment, rl_start_training, rl_stop_training
from hermes_nb.runs.run_dirs import known_run_ids
from hermes_nb.system import home
from hermes_nb.system.home import run_paths

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "faults"
TIMEOUT = 180.0
QUICK: dict[str, Any] = {"total_steps": 4, "steps_per_eval": 0, "trainer.save_checkpoint_interval": 0}


@pytest.fixture
def faulty(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(home.ENV_PATH_VAR, str(FIXTURES))
    run(rl_select_environment("faulty"))
    run(rl_load_config(QUICK_TEST_CONFIG))
    yield
    for run_id in known_run_ids():
        run(rl_stop_training(run_id))


def test_out_of_vocabulary_groups_are_skipped_and_counted_while_the_run_completes(faulty: None) -> None:
    start = run(rl_start_training(fault="out_of_vocab", fault_every=3, **QUICK))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, TIMEOUT)

    assert (status.status, status.step) == ("completed", 4), status.error
    assert status.env_failed_groups >= 1
    env_log = run_paths(start.run_id).logs["env"].read_text()
    # The trainer registered its model's vocabulary (the shipped model's 100 ids); the environment learned it.
    assert "token id 10000 is out of the trained model's vocabulary (ids are in [0, 100))" in env_log


def test_a_streak_of_environment_errors_fails_the_run_naming_the_error(faulty: None) -> None:
    start = run(rl_start_training(fault="raise", fault_every=1, max_consecutive_failures=3, **QUICK))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, TIMEOUT)

    assert status.status == "failed" and status.failed_process == "env"
    cause = "environment failed: FaultEnv: 3 groups failed in a row (last: RuntimeError: broke on item"
    assert status.error is not None and cause in status.error
    assert any(cause in line for line in status.log_tail)
    assert status.env_failed_groups >= 3
    assert "environment faults: " in str(status)
