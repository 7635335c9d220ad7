"""Runs of the quick test with a KL penalty and with two optimizer passes per batch, end to end on the embedded
model: what their metrics must show in metrics.jsonl."""

from __future__ import annotations

import math

import pytest
from run_helpers import run, wait_for_status

from hermes_nb.api import rl_get_results, rl_start_training
from hermes_nb.protocol.metrics import TRAIN_KL, TRAIN_OPTIMIZER_STEPS

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("quick_env")]

COMPLETE_TIMEOUT = 180.0


def _history(**overrides: object) -> list[dict[str, float]]:
    start = run(rl_start_training(**overrides))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, COMPLETE_TIMEOUT)
    assert status.status == "completed", status.error
    return run(rl_get_results(start.run_id)).history


def test_a_kl_penalty_starts_at_zero_then_rises_and_stays_finite() -> None:
    history = _history(**{"trainer.beta": 0.05})
    kl = [row[TRAIN_KL] for row in history if TRAIN_KL in row]
    assert kl, history
    # Step 1 trains the starting weights, which are the reference: the estimator is exactly 0 there.
    assert kl[0] == pytest.approx(0.0, abs=1e-6)
    assert all(math.isfinite(v) for v in kl) and max(kl[1:]) > 0.0, kl


def test_two_iterations_take_two_optimizer_steps_per_batch() -> None:
    history = _history(**{"trainer.num_iterations": 2})
    counts = [row[TRAIN_OPTIMIZER_STEPS] for row in history]
    steps = [b - a for a, b in zip([0.0, *counts], counts, strict=False)]
    # A step whose batch carried no signal takes none; every other takes both passes.
    assert set(steps) <= {0.0, 2.0} and 2.0 in steps, counts
