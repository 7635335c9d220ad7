"""A local run learns: the quickstart config (``configs/quickstart.yaml``: arithmetic, 2-digit addition, on the
embedded model, local backend) raises greedy held-out accuracy within a short run. A regression in the loss, the
advantages, the sampler or the weight sync leaves the accuracy where it started, and fails here."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import REPO_ROOT, run, wait_for_status

from hermes_nb.api import rl_get_results, rl_load_config, rl_select_environment, rl_start_training, rl_stop_training
from hermes_nb.protocol.metrics import EVAL_PERCENT_CORRECT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

QUICKSTART_CONFIG = REPO_ROOT / "configs" / "quickstart.yaml"
# 250 steps: 40-130 s of training on two cores (0.15-0.5 s/step at load 5-8), after 12-35 s of start-up. The
# held-out set is evaluated greedily at steps 0, 125 and 250: 200 items, the same each time, so the lift is paired.
STEPS = 250
RUN = {"total_steps": STEPS, "steps_per_eval": STEPS // 2, "trainer.seed": 0, "env.seed": 0}
MIN_LIFT = 0.05
COMPLETE_TIMEOUT_S = 300.0


@pytest.mark.timeout(COMPLETE_TIMEOUT_S + 60)
def test_a_quickstart_run_raises_held_out_accuracy_within_250_steps() -> None:
    """The step-250 evaluation beats step 0's by MIN_LIFT (5 points of 200 greedy held-out items).

    Measured on 2026-12-01 on two cores shared with other jobs (load 5-8), with ``bench/learning.py``: seeds 3-5 with
    exactly this run's settings (``--seeds 3 4 5 --set total_steps=250 --set steps_per_eval=125``), seeds 0-2 in the
    quickstart's own longer run (``--seeds 0 1 2 --budget 50``, an evaluation every 50 steps; the steps are the same).
    Lifts at step 250 for seeds 0-5: +28.0, +17.0, +24.5, +12.5, +23.5, +30.0 points (mean 22.6, standard deviation
    6.7). The seed (which also picks the held-out items) decides most of it: seeds 0, 1, 2 at load 2 a day earlier
    (``bench/learning.py --write``) read +28.5, +18.0, +23.5 at step 250, within a point of the runs above, although the
    sampler runs ahead of the trainer by as much as the machine allows, so no two runs train on the same batches. This
    test runs seed 0 (+28.0, +28.5). False failures: even if another machine made the run behave like an unseen seed,
    MIN_LIFT lies 2.6 standard deviations below the mean over seeds, about 1 run in 200 (normal approximation); for seed
    0, 23 points below both of its runs, far rarer. Without learning the lift is 0 (the weights do not move) or
    negative, well below MIN_LIFT.
    """
    run(rl_select_environment("arithmetic"))
    run(rl_load_config(QUICKSTART_CONFIG))
    start = run(rl_start_training(**RUN))
    try:
        status = wait_for_status(start.run_id, lambda s: s.is_terminal, COMPLETE_TIMEOUT_S)
    finally:
        run(rl_stop_training(start.run_id))  # a run that timed out ends with the test

    assert status.status == "completed", f"{status.error}\n" + "\n".join(status.log_tail)
    evals = {row["step"]: row[EVAL_PERCENT_CORRECT] for row in run(rl_get_results(start.run_id)).eval_history}
    assert {0, STEPS} <= set(evals), f"evaluations at steps {sorted(evals)} in {Path(start.run_dir)}"
    lift = evals[STEPS] - evals[0]
    print(f"held-out accuracy by step: {evals}; lift {lift:+.3f}")  # shown with -s: a measurement per run
    assert lift >= MIN_LIFT, f"held-out accuracy by step: {evals}; lift {lift:+.3f} < {MIN_LIFT}"
