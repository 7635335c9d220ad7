"""An OpenEnv environment run as it is: the shipped ``calculator_openenv`` (an MCP tool, a multi-step episode)
selected, edited and trained to ``completed`` on the embedded chat model, training exactly the tokens it sampled,
its tool calls in the recorded episodes; and tests/fixtures/openenv/broken_openenv.py's faults each ending a run in
one message with the server's log tail. OpenEnv lives in its own virtual environment (.venvs/openenv, built by
``make test``; ``side_env_python`` skips these tests where it is absent, and fails them in CI)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from run_helpers import run, wait_for_status
from sampled_logprobs import LOGPROB_TOLERANCE, trained_groups, worst_logprob_gap
from side_envs import REPO_ROOT, side_env_python

from hermes_nb.api import rl_edit_config, rl_get_samples, rl_select_environment, rl_start_training, rl_stop_training
from hermes_nb.config import embedded_chat_model_dir
from hermes_nb.errors import EnvironmentPythonError
from hermes_nb.frameworks.openenv.interpreter import OPENENV_PYTHON_VAR
from hermes_nb.runs.run_dirs import known_run_ids
from hermes_nb.system import home

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "openenv"
# A short run takes about a minute here (the server's import of openenv alone is ~6 s); a hung one fails its wait.
RUN_TIMEOUT_S = 240
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(2 * RUN_TIMEOUT_S)]
# Small groups and batches, a short final evaluation: a run of a few steps.
SHORT = {"group_size": 2, "batch_size": 4, "eval_items": 2, "max_num_workers": 2, "wandb.mode": "disabled"}
# The embedded model answers the calculator's problems rarely: a group scoring all 0 carries no signal and would
# be dropped, so a short run would wait long for its batches. Kept, they train (advantage 0) and the run moves.
KEEP_FLAT_GROUPS = {"ensure_scores_are_not_same": False}


@pytest.fixture
def openenv_python(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The OpenEnv Python for every process a run starts, the failure fixture on the search path; runs stopped."""
    python = side_env_python("openenv")
    monkeypatch.setenv(OPENENV_PYTHON_VAR, str(python))
    monkeypatch.setenv(home.ENV_PATH_VAR, str(FIXTURES))
    yield python
    for run_id in known_run_ids():
        run(rl_stop_training(run_id))


def test_calculator_openenv_trains_to_completed_on_the_tokens_it_sampled_with_its_tool_calls_recorded(
    openenv_python: Path,
) -> None:
    run(rl_select_environment("calculator_openenv"))
    run(rl_edit_config({**SHORT, **KEEP_FLAT_GROUPS}))

    start = run(rl_start_training(total_steps=2))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, RUN_TIMEOUT_S)

    assert status.status == "completed", status.error
    # Step 1 trains groups sampled from the weights the run starts with, which this test can load itself.
    first_groups = trained_groups(home.run_dir(start.run_id))[1]
    gap = worst_logprob_gap(first_groups, embedded_chat_model_dir(), temperature=1.0)
    print(f"worst logprob gap at step 1: {gap:.2e}")
    assert gap <= LOGPROB_TOLERANCE, f"a kept logprob differs from the model's by {gap}"
    samples = "\n".join(str(run(rl_get_samples(start.run_id, step, n=100))) for step in (1, 2))
    assert "[tool call] calculate" in samples


def test_the_launcher_refuses_an_openenv_python_without_openenv_before_anything_starts(
    openenv_python: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(rl_select_environment("calculator_openenv"))
    monkeypatch.setenv(OPENENV_PYTHON_VAR, str(REPO_ROOT / ".venv" / "bin" / "python"))

    with pytest.raises(EnvironmentPythonError) as refused:
        run(rl_start_training(total_steps=2))

    message = str(refused.value)
    assert "\n" not in message and "cannot import openenv" in message and "pip install openenv" in message
    assert not known_run_ids()


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("reset", "failed in reset: reset exploded on seed"),
        ("die", "exited (code 3)"),
        ("nan", "the reward 'ten' is not a number"),
    ],
)
def test_a_fault_of_the_openenv_environment_ends_the_run_in_one_clear_message(
    openenv_python: Path, monkeypatch: pytest.MonkeyPatch, fault: str, expected: str
) -> None:
    monkeypatch.setenv("BROKEN_OPENENV_FAULT", fault)
    run(rl_select_environment("broken_openenv"))
    # Every group fails alike here: three in a row end the run as twenty (the default) would, sooner. A dead
    # server needs no streak: its run keeps the default and ends at its first failed group.
    run(rl_edit_config(SHORT if fault == "die" else {**SHORT, "max_consecutive_failures": 3}))

    start = run(rl_start_training(total_steps=2))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, RUN_TIMEOUT_S)

    assert status.status == "failed"
    assert status.failed_process == "env"
    assert status.error is not None and expected in status.error
    assert ("groups failed in a row" in status.error) == (fault != "die"), status.error
