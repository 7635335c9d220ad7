"""A short on-policy distillation run end to end: the quick test's student scored by a teacher of another
architecture with the same tokenizer; the run completes and logs the reverse KL to the teacher every step."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from run_helpers import run, wait_for_status

from hermes_nb.api import rl_get_results, rl_start_training
from hermes_nb.protocol.metrics import TRAIN_TEACHER_KL
from hermes_nb.testing import ModelShape, make_tiny_model

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("quick_env")]

COMPLETE_TIMEOUT = 180.0


def test_a_distillation_run_completes_and_logs_the_teacher_kl_each_step(tmp_path: Path) -> None:
    teacher = make_tiny_model(tmp_path / "teacher", ModelShape(hidden_size=48, num_hidden_layers=3), seed=3)
    start = run(rl_start_training(**{"trainer.teacher_model": str(teacher), "trainer.teacher_kl_coef": 0.5}))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, COMPLETE_TIMEOUT)
    assert status.status == "completed", status.error
    history = run(rl_get_results(start.run_id)).history
    kl = [row[TRAIN_TEACHER_KL] for row in history if TRAIN_TEACHER_KL in row]
    assert kl and all(math.isfinite(v) for v in kl), history
