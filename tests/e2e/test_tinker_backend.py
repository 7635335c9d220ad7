"""Runs with ``trainer.backend: tinker`` against a real Tinker API server: SkyRL tx on CPU (``tests/tinker_server.py``,
from the ``skyrl`` side environment) serving hermes-nb's embedded model, driven through the tinker SDK the server
speaks (0.24.1). One server serves the whole module (it takes ~20 s to start and JIT-compiles per batch shape); each
test trains its own LoRA adapter on it.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest
from run_helpers import QUICK_TEST_CONFIG, run, wait_for_status
from tinker_server import FAKE_KEY, SkyrlServer, start_skyrl_server

from hermes_nb.api import (
    rl_check_status,
    rl_edit_config,
    rl_get_results,
    rl_load_config,
    rl_select_environment,
    rl_start_training,
    rl_stop_training,
    rl_test_inference,
)
from hermes_nb.errors import TinkerError
from hermes_nb.protocol.checkpoints import read_checkpoints
from hermes_nb.protocol.tinker import read_checkpoint
from hermes_nb.runs.registry import known_run_ids
from hermes_nb.runs.reports import StartResult
from hermes_nb.system.home import embedded_base_model_dir

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# CPU JAX: the first forward_backward of each batch shape compiles (5-30 s); later ones take ~1 s.
RUN_TIMEOUT = 300.0
SHORT_RUN = {"total_steps": 3, "trainer.save_checkpoint_interval": 2, "steps_per_eval": 0, "max_num_workers": 4}
ON_TINKER = {"trainer.backend": "tinker", "trainer.lora_rank": 8}
# One-digit additions (100 problems; the embedded model starts near 0.15 reward) in groups of 8, so few groups are
# dropped for equal scores, at a LoRA learning rate. Measured: 0.15 -> 0.34 and 0.16 -> 0.24 (means of the first
# and last four of fifteen steps); twenty steps and five-step means leave the noise of 32 samples a step behind.
LEARNING_RUN = {
    "total_steps": 20,
    "digits": 1,
    "group_size": 8,
    "batch_size": 32,
    "steps_per_eval": 0,
    "max_num_workers": 4,
    "trainer.learning_rate": 3e-3,
}
LEARNING_TIMEOUT = 600.0


@pytest.fixture(scope="module")
def skyrl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkyrlServer]:
    server = start_skyrl_server(embedded_base_model_dir(), tmp_path_factory.mktemp("skyrl"))
    yield server
    server.stop()


@pytest.fixture
def on_tinker(skyrl: SkyrlServer, quick_env: None, monkeypatch: pytest.MonkeyPatch) -> SkyrlServer:
    """The selected environment configured to train on the module's SkyRL server."""
    monkeypatch.setenv("TINKER_API_KEY", FAKE_KEY)
    run(rl_edit_config({**ON_TINKER, "tinker.base_url": skyrl.url}))
    return skyrl


@pytest.fixture(scope="module")
def completed(skyrl: SkyrlServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartResult]:
    """One short run on the module's server, trained to completion (several tests read what it left)."""
    home = tmp_path_factory.mktemp("tinker_home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HERMES_NB_HOME", str(home))
        patch.setenv("TINKER_API_KEY", FAKE_KEY)
        run(rl_select_environment("arithmetic"))
        run(rl_load_config(QUICK_TEST_CONFIG))
        run(rl_edit_config({**ON_TINKER, "tinker.base_url": skyrl.url}))
        start = run(rl_start_training(**SHORT_RUN))
        status = wait_for_status(start.run_id, lambda s: s.is_terminal, RUN_TIMEOUT)
        assert status.status == "completed", f"{status.error}\n{skyrl.log_tail()}"
        yield start
        for run_id in known_run_ids():
            run(rl_stop_training(run_id))


@pytest.fixture
def completed_home(completed: StartResult, monkeypatch: pytest.MonkeyPatch) -> StartResult:
    """The completed run's home and key, for a test that reads or uses that run."""
    monkeypatch.setenv("HERMES_NB_HOME", str(Path(completed.run_dir).parents[1]))
    monkeypatch.setenv("TINKER_API_KEY", FAKE_KEY)
    return completed


def test_a_run_on_tinker_completes_with_metrics_and_tinker_checkpoints(completed_home: StartResult) -> None:
    status = run(rl_check_status(completed_home.run_id))

    assert (status.status, status.step) == ("completed", 3)
    assert status.metrics.loss is not None and status.metrics.reward_mean is not None
    run_dir = Path(completed_home.run_dir)
    checkpoints = read_checkpoints(run_dir / "checkpoints.jsonl")
    assert [c.step for c in checkpoints] == [2, 3]
    assert all(c.tinker_path and c.tinker_path.startswith("tinker://") for c in checkpoints)
    saved = read_checkpoint(Path(checkpoints[-1].path))
    assert saved is not None and saved.state_path == checkpoints[-1].tinker_path
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    # Computed from the logprobs Tinker returned (its own metrics come back empty from SkyRL).
    assert all(r["values"]["train/ratio_mean"] > 0 for r in rows)


def test_status_shows_the_remote_side_without_secrets(completed_home: StartResult, skyrl: SkyrlServer) -> None:
    status = run(rl_check_status(completed_home.run_id))

    info = status.tinker
    assert info is not None
    assert (info.base_model, info.lora_rank, info.base_url) == (str(embedded_base_model_dir()), 8, skyrl.url)
    assert info.tokens_trained > 0 and info.tokens_sampled > 0
    assert f"LoRA rank 8 at {skyrl.url}" in str(status)
    assert FAKE_KEY not in status.model_dump_json()


def test_downloaded_final_weights_load_with_from_pretrained_and_carry_the_training(
    completed_home: StartResult,
) -> None:
    from transformers import AutoModelForCausalLM

    results = run(rl_get_results(completed_home.run_id, download=True))

    assert results.final_weights_path == str(Path(completed_home.run_dir) / "tinker_weights" / "model")
    trained = AutoModelForCausalLM.from_pretrained(results.final_weights_path).state_dict()
    base = AutoModelForCausalLM.from_pretrained(str(embedded_base_model_dir())).state_dict()
    changed = [k for k in base if not (trained[k] == base[k]).all()]
    assert any(".self_attn.q_proj." in k for k in changed), "the merged model equals the base model"


def test_rl_test_inference_samples_the_tinker_checkpoint(completed_home: StartResult) -> None:
    result = run(rl_test_inference(num_steps=2, group_size=2, models=completed_home.run_id))

    (tested,) = result.results
    assert tested.status == "ok", tested.error
    assert tested.completions == 4


def test_a_missing_key_is_refused_before_the_run_starts(
    on_tinker: SkyrlServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TINKER_API_KEY")

    with pytest.raises(TinkerError, match="TINKER_API_KEY: not set"):
        run(rl_start_training(**SHORT_RUN))


def test_an_unknown_base_model_is_refused_listing_what_the_server_offers(on_tinker: SkyrlServer) -> None:
    with pytest.raises(TinkerError, match="offers '") as refused:
        run(rl_start_training(**{**SHORT_RUN, "trainer.base_model": "Qwen/Qwen3-8B"}))

    assert str(embedded_base_model_dir()) in str(refused.value)
    assert FAKE_KEY not in str(refused.value)


def test_a_stopped_run_on_tinker_resumes_its_steps_and_optimizer(on_tinker: SkyrlServer) -> None:
    first = run(rl_start_training(total_steps=200, steps_per_eval=0))
    wait_for_status(first.run_id, lambda s: s.step >= 2, RUN_TIMEOUT)
    stopped = run(rl_stop_training(first.run_id))
    assert stopped.status == "stopped"
    last = read_checkpoints(Path(first.run_dir) / "checkpoints.jsonl")[-1]
    assert last.kind == "stop" and last.tinker_path is not None

    resumed = run(rl_start_training(resume_from=first.run_id, total_steps=last.step + 2))
    status = wait_for_status(resumed.run_id, lambda s: s.is_terminal, RUN_TIMEOUT)

    assert status.status == "completed", f"{status.error}\n{on_tinker.log_tail()}"
    own = [json.loads(line)["step"] for line in (Path(resumed.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert own == [last.step + 1, last.step + 2]
    trainer_log = Path(resumed.logs["trainer"]).read_text()
    assert f"resumed from {last.path}" in trainer_log
    history = [row["step"] for row in run(rl_get_results(resumed.run_id)).history]
    assert history == list(range(1, last.step + 3))


def test_reward_rises_on_arithmetic_within_a_short_run(on_tinker: SkyrlServer) -> None:
    """The environment's reward (every completion it sampled) over the last five steps beats the first five."""
    start = run(rl_start_training(**LEARNING_RUN))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, LEARNING_TIMEOUT)
    assert status.status == "completed", f"{status.error}\n{on_tinker.log_tail()}"

    rewards = env_rewards(Path(start.run_dir))

    first, last = statistics.fmean(rewards[:5]), statistics.fmean(rewards[-5:])
    assert last > first + 0.05, f"reward by step: {rewards}"


def env_rewards(run_dir: Path) -> list[float]:
    """The environment's train/reward_mean of each step (every completion it sampled, not only the trained ones)."""
    by_step: dict[int, float] = {}
    for line in (run_dir / "env_metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "train/reward_mean" in row["values"]:
            by_step[row["step"]] = row["values"]["train/reward_mean"]
    return [by_step[s] for s in sorted(by_step)]
