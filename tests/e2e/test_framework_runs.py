"""A framework added from outside the package (tests/fixtures/frameworks/toy_framework, registered with
``HERMES_NB_FRAMEWORKS``): its environment is listed, selected, trained to ``completed`` and model-tested, with no
change to discovery, the launcher, the supervisor or the model test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from run_helpers import QUICK_TEST_CONFIG, run, wait_for_status
from side_envs import REPO_ROOT

from hermes_nb.api import (
    rl_list_environments,
    rl_load_config,
    rl_select_environment,
    rl_start_training,
    rl_stop_training,
    rl_test_inference,
)
from hermes_nb.frameworks.registry import FRAMEWORKS_VAR
from hermes_nb.runs.run_dirs import known_run_ids
from hermes_nb.system import home

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "frameworks"
RUN_TIMEOUT_S = 300


@pytest.fixture
def toy_framework(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The toy framework registered in this process and every process it starts; its environment on the path."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    pythonpath = os.pathsep.join(p for p in (str(FIXTURES), os.environ.get("PYTHONPATH", "")) if p)
    monkeypatch.setenv("PYTHONPATH", pythonpath)
    monkeypatch.setenv(FRAMEWORKS_VAR, "toy_framework.adapter:ADAPTER")
    monkeypatch.setenv(home.ENV_PATH_VAR, str(FIXTURES / "envs"))
    yield
    for run_id in known_run_ids():
        run(rl_stop_training(run_id))


def test_an_environment_of_a_framework_registered_from_outside_is_listed_selected_trained_and_tested(
    toy_framework: None,
) -> None:
    listing = run(rl_list_environments())
    [toy] = [env for env in listing.environments if env.name == "toy_double"]
    assert toy.framework == "toy"
    assert "[toy] Double a digit" in str(listing)

    selection = run(rl_select_environment("toy_double"))
    assert selection.environment.framework == "toy"
    run(rl_load_config(QUICK_TEST_CONFIG))
    start = run(rl_start_training(total_steps=2, **{"wandb.mode": "disabled"}))
    status = wait_for_status(start.run_id, lambda s: s.status in ("completed", "failed"), RUN_TIMEOUT_S)
    assert status.status == "completed", status.error
    assert status.step == 2

    tested = run(rl_test_inference(num_steps=1, group_size=2, models="embedded"))
    [result] = tested.results
    assert result.status == "ok", result.error
    assert result.steps == 1 and result.completions == 2
