"""A real run of the shipped ``reasoning_gym`` environment on the embedded model: a two-dataset mix selected and
edited through the public API, trained to ``completed``, its metrics finite, both datasets in its evaluation."""

from __future__ import annotations

import math

import pytest
from run_helpers import QUICK_TEST_CONFIG, run, wait_for_status

from hermes_nb.api import rl_edit_config, rl_get_results, rl_load_config, rl_select_environment, rl_start_training
from hermes_nb.system import home

pytest.importorskip("reasoning_gym", reason="needs the environments extra: pip install -e '.[environments]'")
pytestmark = pytest.mark.e2e

COMPLETE_TIMEOUT = 120.0
# Sums and products of one-digit numbers: one- or two-digit answers, which the embedded model can at least start.
MIX = {
    "datasets": {"chain_sum": 1.0, "products": 1.0},
    "dataset_params": {"chain_sum": {"max_terms": 2, "max_digits": 1}, "products": {"max_digits": 1}},
    "max_completion_tokens": 4,
    # The embedded model was pretrained on "12+34=" alone: to reasoning-gym's sentences it answers nothing, so
    # every group scores all 0 and, dropped as carrying no signal, none would reach the trainer. Kept, they do.
    "ensure_scores_are_not_same": False,
}


def test_a_two_dataset_mix_trains_to_completed_with_finite_metrics() -> None:
    run(rl_select_environment("reasoning_gym"))
    run(rl_load_config(QUICK_TEST_CONFIG))
    run(rl_edit_config(MIX))

    start = run(rl_start_training(total_steps=3))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, COMPLETE_TIMEOUT)

    assert status.status == "completed", status.error
    results = run(rl_get_results(start.run_id))
    assert len(results.history) == 3 and results.eval_history
    values = [v for row in results.history + results.eval_history for k, v in row.items() if k not in ("step", "time")]
    assert values and all(math.isfinite(v) for v in values if isinstance(v, float | int))
    config = (home.run_dir(start.run_id) / "config.yaml").read_text(encoding="utf-8")
    assert "products" in config and "chain_sum" in config
