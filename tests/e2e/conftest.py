"""Real runs on the embedded default: the shipped base model, a shipped environment, three real processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from run_helpers import QUICK_TEST_CONFIG, run

from hermes_nb.api import rl_load_config, rl_select_environment, rl_stop_training
from hermes_nb.runs.run_dirs import known_run_ids


@pytest.fixture
def quick_env() -> Iterator[None]:
    """The arithmetic environment with configs/quick_test.yaml; every run still going at the end is stopped."""
    run(rl_select_environment("arithmetic"))
    run(rl_load_config(QUICK_TEST_CONFIG))
    yield
    for run_id in known_run_ids():
        run(rl_stop_training(run_id))
