"""Run health on real runs (``hermes_nb.health``): a learning rate 1,000x the quickstart's is found collapsing and
stopped when ``health.stop_on`` asks; the quickstart of the same length shows no finding and records what it cost
(on the CPU: no GPU figure, no money);
a run whose every group scores alike is told so before its first step.

The thresholds were sized from measured runs (docs/health.md): healthy quickstarts of 120 and 300 steps (seeds 0
and 1) show no finding; two 1,000x runs crossed the entropy check at their fourth step, their last before a stall.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from run_helpers import REPO_ROOT, run, wait_for_status

from hermes_nb.api import rl_check_status, rl_load_config, rl_select_environment, rl_start_training, rl_stop_training
from hermes_nb.runs.run_dirs import known_run_ids
from hermes_nb.system import home

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

QUICKSTART_CONFIG = REPO_ROOT / "configs" / "quickstart.yaml"
QUICKSTART_LEARNING_RATE = 2e-4  # configs/quickstart.yaml's
STEPS = 40
RUN: dict[str, Any] = {"total_steps": STEPS, "steps_per_eval": 0, "trainer.seed": 0, "env.seed": 0}
# How a 1,000x learning rate shows: entropy falling (seen by step 4 in two runs under load) or, where the policy
# collapses within three steps (a quiet machine's run, 2026-12-06), every group scoring alike from then on.
COLLAPSE_FINDINGS = {"entropy_collapse", "non_finite", "no_signal"}
TIMEOUT_S = 180.0


@pytest.fixture
def quickstart() -> Iterator[None]:
    run(rl_select_environment("arithmetic"))
    run(rl_load_config(QUICKSTART_CONFIG))
    yield
    for run_id in known_run_ids():
        run(rl_stop_training(run_id))


@pytest.mark.timeout(TIMEOUT_S + 60)
def test_a_learning_rate_1000x_the_quickstarts_is_found_collapsing_and_stopped(quickstart: None) -> None:
    high = {"trainer.learning_rate": 1000 * QUICKSTART_LEARNING_RATE, "health.stop_on": sorted(COLLAPSE_FINDINGS)}
    start = run(rl_start_training(**RUN, **high))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, TIMEOUT_S)

    found = [f for f in status.health if f.name in COLLAPSE_FINDINGS]
    assert found and found[0].step <= STEPS, f"findings: {status.health}\n{status}"
    assert status.status == "stopped", f"{status}"
    assert status.stopped_by is not None and found[0].name in status.stopped_by
    assert status.checkpoints, "a run stopped by its health saves a checkpoint, as any graceful stop"


@pytest.mark.timeout(TIMEOUT_S + 60)
def test_the_quickstart_of_the_same_length_shows_no_finding_and_records_its_cost(quickstart: None) -> None:
    start = run(rl_start_training(**RUN))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, TIMEOUT_S)

    assert status.status == "completed", f"{status.error}\n" + "\n".join(status.log_tail)
    assert status.health == [], "\n".join(f.text() for f in status.health)
    cost = status.cost
    assert cost is not None and cost.final, f"{status}"
    assert set(cost.actual.processes) == {"api", "trainer", "env"}
    assert cost.actual.cpu_seconds > 0 and cost.actual.peak_rss_bytes > 0
    assert cost.actual.tokens_trained and cost.actual.tokens_sampled
    assert set(cost.actual.wall_seconds) == {"start", "train"}
    # A CPU run: no process used a GPU, so no GPU figure at all (not a zero); a local run has no price.
    assert all(p.gpu_seconds is None and p.gpu_peak_bytes is None for p in cost.actual.processes.values())
    assert cost.actual.price_usd is None and "GPU" not in cost.text() and "$" not in cost.text()


@pytest.mark.timeout(TIMEOUT_S + 60)
def test_a_run_whose_every_group_is_equal_shows_no_signal_before_its_first_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(home.ENV_PATH_VAR, str(REPO_ROOT / "tests" / "fixtures" / "health"))
    run(rl_select_environment("equal_scores"))
    run(rl_load_config(REPO_ROOT / "configs" / "quick_test.yaml"))
    start = run(rl_start_training(total_steps=5, steps_per_eval=0))
    try:
        status = wait_for_status(start.run_id, lambda s: bool(s.health) or s.is_terminal, TIMEOUT_S)
        assert [f.name for f in status.health] == ["no_signal"], f"{status}"
        assert status.health[0].step == 0
        assert run(rl_check_status(start.run_id)).step == 0
        assert "no_signal" in str(status)
    finally:
        run(rl_stop_training(start.run_id))
