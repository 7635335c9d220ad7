"""Resume (weights, optimizer, step), transfer (weights only) and replay (mixing, on-policy) in the trainer,
driving the real loop functions with deterministic batches."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest
import torch

from hermes_nb.backends import make_backend
from hermes_nb.config import RunConfig, TrainerConfig
from hermes_nb.errors import TransferError
from hermes_nb.inference.contract import Policy
from hermes_nb.inference.engine import InferenceEngine
from hermes_nb.inference.sampler import SampleRow
from hermes_nb.metrics.logger import MetricsLogger
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.checkpoints import read_checkpoints
from hermes_nb.protocol.run_files import CHECKPOINTS_FILE, TRAJECTORIES_FILE
from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.testing import make_tiny_model, shipped_shape
from hermes_nb.trainer.batches.replay import (
    ReplayMixer,
    ReplayPool,
    mix_batch,
    read_replay_groups,
    with_replay,
)
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.run.checkpoints import record_batch, save_checkpoint
from hermes_nb.trainer.run.loop import LoopSettings, run_training, train_step
from hermes_nb.trainer.run.main import restore

torch.set_num_threads(1)
TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


def _group(first: int, scores: list[float], logprobs: float | None = None) -> ScoredDataGroup:
    tokens = [[first, first + 1, 20 + i, 30 + i] for i in range(len(scores))]
    masks = [[-100, -100, t[2], t[3]] for t in tokens]
    sampled = [[1.0, 1.0, logprobs, logprobs] for _ in tokens] if logprobs is not None else None
    return ScoredDataGroup(tokens=tokens, masks=masks, scores=scores, inference_logprobs=sampled)


def _batch(step: int) -> list[ScoredDataGroup]:
    """The same batch for the same step, whoever asks: a deterministic stand-in for the API. Sampling logprobs
    are sent so the importance-sampling loss depends on the weights (on-policy its value is -mean(A) = 0)."""
    return [_group(5 + step, [1.0, 0.0, 0.5], logprobs=-4.0), _group(9 + step, [0.0, 1.0, 0.0], logprobs=-4.0)]


class StepSource:
    """Batches ``first..last`` (1-based steps), each exactly once."""

    def __init__(self, first: int, last: int) -> None:
        self.steps = list(range(first, last + 1))

    def next_batch(self, stop: threading.Event) -> list[ScoredDataGroup] | None:
        return _batch(self.steps.pop(0)) if self.steps else None


def _config(model_dir: Path, total_steps: int, **trainer: object) -> RunConfig:
    return RunConfig(
        env={"batch_size": 6, "total_steps": total_steps},
        trainer=TrainerConfig(base_model=str(model_dir), learning_rate=1e-2, save_checkpoint_interval=2, **trainer),
    )


def _train(backend: LocalBackend, config: RunConfig, run_dir: Path, source: object, start_step: int = 0) -> list[dict]:
    metrics = MetricsLogger(run_dir / "metrics.jsonl")
    settings = LoopSettings.from_config(config, run_dir)
    run_training(backend, source, settings, config, stop=threading.Event(), metrics=metrics, start_step=start_step)  # type: ignore[arg-type]
    metrics.close()
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _adam_steps(backend: LocalBackend) -> set[float]:
    assert backend._optimizer is not None
    return {float(state["step"]) for state in backend._optimizer.state.values()}


# ---- resume -------------------------------------------------------------------------------------------------


def test_resumed_step_matches_the_step_that_would_have_followed(model_dir: Path, tmp_path: Path) -> None:
    config = _config(model_dir, total_steps=3)
    straight = LocalBackend(model_dir)
    rows = _train(straight, config, tmp_path / "a", StepSource(1, 3))
    checkpoint = next(c for c in read_checkpoints(tmp_path / "a" / CHECKPOINTS_FILE) if c.step == 2)

    resumed_config = config.model_copy(
        update={"infra": config.infra.model_copy(update={"resume_checkpoint": checkpoint.path, "start_step": 2})}
    )
    resumed = make_backend(resumed_config)
    assert restore(resumed, resumed_config) == 2
    assert _adam_steps(resumed) == {2.0}
    resumed_rows = _train(resumed, resumed_config, tmp_path / "b", StepSource(3, 3), start_step=2)

    assert [r["step"] for r in resumed_rows] == [3]
    assert resumed_rows[0]["values"][keys.TRAIN_LOSS] == pytest.approx(rows[2]["values"][keys.TRAIN_LOSS], abs=1e-6)
    assert rows[2]["values"][keys.TRAIN_LOSS] != rows[1]["values"][keys.TRAIN_LOSS]
    for a, b in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=TOLERANCE, rtol=0)
    assert _adam_steps(resumed) == {3.0}
    assert [(c.step, c.kind) for c in read_checkpoints(tmp_path / "b" / CHECKPOINTS_FILE)] == [(3, "final")]


def test_restore_refuses_a_start_step_that_disagrees_with_the_checkpoint(model_dir: Path, tmp_path: Path) -> None:
    backend = LocalBackend(model_dir)
    record = save_checkpoint(backend, RunConfig(), tmp_path, 4, "stop")
    config = RunConfig(infra={"resume_checkpoint": record.path, "start_step": 3})
    with pytest.raises(TransferError, match="infra.start_step: 3 but .* step 4"):
        restore(LocalBackend(model_dir), config)


# ---- transfer -----------------------------------------------------------------------------------------------


def _source_checkpoint(model_dir: Path, run_dir: Path) -> Path:
    backend = LocalBackend(model_dir)
    config = _config(model_dir, total_steps=2)
    _train(backend, config, run_dir, StepSource(1, 2))
    return Path(read_checkpoints(run_dir / CHECKPOINTS_FILE)[-1].path)


def _greedy(model: object, tokenizer: object, prompts: list[list[int]]) -> list[list[int]]:
    engine = InferenceEngine(seed=0)
    engine.publish(Policy(model=model, tokenizer=tokenizer, version=0, name="x"))
    rows = [SampleRow(prompt=p, max_tokens=8, temperature=0.0) for p in prompts]

    async def sample() -> list[list[int]]:
        results, _ = await engine.sample(rows)
        return [r.token_ids for r in results]

    try:
        return asyncio.run(sample())
    finally:
        engine.close()


def test_transfer_starts_from_the_source_weights_with_a_fresh_optimizer(model_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    source_dir = _source_checkpoint(model_dir, tmp_path / "a")
    config = _config(model_dir, total_steps=5)
    config = config.model_copy(update={"infra": config.infra.model_copy(update={"init_weights": str(source_dir)})})
    backend = make_backend(config)
    source = AutoModelForCausalLM.from_pretrained(str(source_dir)).eval()
    base = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    tokens = torch.tensor([[5, 6, 7, 8, 20, 30]])
    with torch.no_grad():
        logits = backend.model(input_ids=tokens).logits
        assert torch.equal(logits, source(input_ids=tokens).logits)
        assert not torch.allclose(logits, base(input_ids=tokens).logits)

    prompts = [[6, 7], [10, 11, 12], [40]]
    policy = backend.sampler_model()
    assert _greedy(policy, backend.tokenizer, prompts) == _greedy(source, backend.tokenizer, prompts)
    assert backend._optimizer is None
    train_step(backend, _batch(1), config.trainer)
    assert _adam_steps(backend) == {1.0}


def test_transfer_from_another_architecture_is_a_transfer_error(model_dir: Path, tmp_path: Path) -> None:
    wide = make_tiny_model(tmp_path / "wide", shipped_shape())
    with pytest.raises(TransferError, match=f"infra.init_weights: {wide} does not fit the base model"):
        LocalBackend(model_dir, init_weights=wide)


# ---- replay -------------------------------------------------------------------------------------------------


def _groups(first: int, count: int, size: int) -> list[ScoredDataGroup]:
    return [_group(first + i, [1.0] + [0.0] * (size - 1)) for i in range(count)]


@pytest.mark.parametrize(
    ("weight", "replay_size", "expected_replay", "expected_api"),
    [
        (0.25, 4, 1, 3),  # 4 of 16 sequences replayed, the API's last group dropped
        (0.5, 4, 2, 2),
        (0.3, 4, 1, 3),  # 4.8 sequences wanted: one group of 4 is the closest
        (0.5, 8, 1, 2),  # groups of another size: whole groups still
        (1.0, 4, 4, 0),
        (0.1, 8, 0, 4),  # one replay group of 8 would overshoot 1.6 more than none does
    ],
)
def test_mix_batch_replays_the_closest_whole_group_share(
    weight: float, replay_size: int, expected_replay: int, expected_api: int
) -> None:
    api = _groups(50, count=4, size=4)
    replay = _groups(10, count=6, size=replay_size)
    mixed, replayed = mix_batch(api, ReplayPool(replay, seed=0), weight)
    assert sum(g in replay for g in mixed) == expected_replay
    assert mixed[expected_replay:] == api[:expected_api]
    assert replayed == expected_replay * replay_size


def _drawn(pool: ReplayPool, count: int) -> list[int]:
    return [pool.take().tokens[0][0] for _ in range(count)]


def test_replay_pool_draws_every_group_once_per_pass_in_a_seeded_order() -> None:
    groups = _groups(10, count=5, size=2)
    pool = ReplayPool(groups, seed=3)
    first_pass = _drawn(pool, 5)
    assert sorted(first_pass) == [10, 11, 12, 13, 14]
    assert sorted(_drawn(pool, 5)) == [10, 11, 12, 13, 14]
    assert _drawn(ReplayPool(groups, seed=3), 5) == first_pass
    assert _drawn(ReplayPool(groups, seed=4), 5) != first_pass


def test_replayed_groups_lose_their_sampling_logprobs_and_no_signal_groups(tmp_path: Path) -> None:
    with_signal = _group(5, [1.0, 0.0], logprobs=-5.0).model_copy(update={"advantages": [[9.0] * 4, [9.0] * 4]})
    record_batch(tmp_path, 1, [with_signal, _group(7, [1.0, 1.0], logprobs=-5.0)])
    groups = read_replay_groups(tmp_path / TRAJECTORIES_FILE)
    assert [g.tokens for g in groups] == [with_signal.tokens]
    assert groups[0].inference_logprobs is None and groups[0].advantages is None


def test_replayed_groups_train_on_policy(model_dir: Path, tmp_path: Path) -> None:
    # Logprobs far from the current policy's: importance sampling against them would give ratios far from 1.
    stale = _group(5, [1.0, 0.0, 0.0], logprobs=-12.0)
    record_batch(tmp_path, 1, [stale])
    backend = LocalBackend(model_dir)
    off_policy = train_step(LocalBackend(model_dir), [stale], TrainerConfig())
    on_policy = train_step(backend, read_replay_groups(tmp_path / TRAJECTORIES_FILE), TrainerConfig())
    assert off_policy["train/ratio_mean"] > 100
    assert on_policy["train/ratio_mean"] == pytest.approx(1.0, abs=1e-6)


def test_replay_is_mixed_in_for_fine_tune_steps_and_logged(model_dir: Path, tmp_path: Path) -> None:
    record_batch(tmp_path, 1, _groups(60, count=3, size=3))
    config = _config(model_dir, total_steps=3, transfer_learning=True, transfer_weight=0.5, fine_tune_steps=2)
    config = config.model_copy(
        update={"infra": config.infra.model_copy(update={"replay_trajectories": str(tmp_path / TRAJECTORIES_FILE)})}
    )
    source = with_replay(StepSource(1, 3), config, start_step=0)
    assert isinstance(source, ReplayMixer)
    run_dir = tmp_path / "run"
    rows = _train(LocalBackend(model_dir), config, run_dir, source)
    assert [r["values"][keys.TRAIN_REPLAY_FRACTION] for r in rows] == [0.5, 0.5, 0.0]


def test_replay_is_off_without_transfer_learning_or_past_the_window(model_dir: Path, tmp_path: Path) -> None:
    source = StepSource(1, 3)
    plain = _config(model_dir, total_steps=3)
    assert with_replay(source, plain, start_step=0) is source
    resumed = _config(model_dir, total_steps=9, transfer_learning=True, transfer_weight=0.5, fine_tune_steps=2)
    resumed = resumed.model_copy(
        update={"infra": resumed.infra.model_copy(update={"replay_trajectories": str(tmp_path / "none.gz")})}
    )
    assert with_replay(source, resumed, start_step=2) is source
    with pytest.raises(TransferError, match="infra.replay_trajectories: .*none.gz does not exist"):
        with_replay(source, resumed, start_step=0)
