"""One meaning of "correct": the environment's verdict on each completion, counted the same by every reader.

A partial-credit environment (1.0 for the answer, 0.5 for a wrong digit) runs against a fake inference server
whose sampled choice ``i`` answers ``str(i % 2)`` and whose greedy answer is ``"0"``: half of every group is
right, yet every completion scores above zero and the mean score is 0.75. The environment's metrics, the
trainer's ``train/percent_correct`` (from groups that crossed the real trajectory API) and ``rl_test_inference``
must all say one half.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from env_host_fakes import fake_inference_server, trajectory_api_process

from hermes_nb import api
from hermes_nb.config import InfraConfig, RunConfig, WandbConfig
from hermes_nb.env import QAEnv, build_scored_group
from hermes_nb.env.types import SampledCompletion
from hermes_nb.env_host import loop as runtime
from hermes_nb.env_host.loading import load_env_class, make_env
from hermes_nb.env_host.stats import GroupStats
from hermes_nb.metrics.reader import read_all_metrics
from hermes_nb.model_test.runner import rl_test_inference
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.run_files import ENV_METRICS_FILE
from hermes_nb.protocol.trajectory import (
    CORRECT_OVERRIDE,
    BatchResponse,
    Registration,
    ScoredDataGroup,
    score_is_correct,
)
from hermes_nb.trainer.step.step_metrics import batch_score_metrics

pytestmark = pytest.mark.timeout(180)

BATCH = 4
GROUP = 2
STEPS = 3

PARTIAL_ENV = '''
"""Answer "q<n>=" with the parity of n: 1.0 for it, 0.5 for any other digit (right format), else 0.0."""
import random

from hermes_nb.env import QAEnv, QAItem


class PartialEnv(QAEnv):
    name = "partial"

    def generate_problem(self, rng: random.Random) -> QAItem:
        n = rng.randrange(10_000)
        return QAItem(prompt=f"q{n}=", answer=str(n % 2))

    def max_completion_tokens(self) -> int:
        return 2

    def score_completion(self, text: str, answer: str) -> float:
        text = text.strip()
        if text == answer:
            return 1.0
        return 0.5 if text.isdigit() else 0.0
'''


@pytest.fixture
def partial_env_file(tmp_path: Path) -> Path:
    directory = tmp_path / "envs"
    directory.mkdir()
    path = directory / "partial_env.py"
    path.write_text(PARTIAL_ENV, encoding="utf-8")
    return path


def _run_config(run_dir: Path, api_url: str, inference_url: str) -> RunConfig:
    infra = InfraConfig(run_id="c1", run_dir=str(run_dir), api_url=api_url, inference_url=inference_url)
    env = {"group_size": GROUP, "batch_size": BATCH, "max_num_workers": 2, "steps_per_eval": 0, "eval_items": 40}
    return RunConfig(env=env, infra=infra, wandb=WandbConfig(mode="disabled"))


async def _play_trainer(api_url: str, steps: int) -> list[list[ScoredDataGroup]]:
    """The trainer's side of the wire: register, then take ``steps`` batches as they come."""
    batches: list[list[ScoredDataGroup]] = []
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as client:
        registration = Registration(batch_size=BATCH, max_token_len=64, num_steps=steps)
        (await client.post("/register", content=registration.model_dump_json())).raise_for_status()
        while len(batches) < steps:
            answer = BatchResponse.model_validate_json((await client.get("/batch")).content)
            if answer.batch:
                batches.append(answer.batch)
            else:
                await asyncio.sleep(0.05)
    return batches


async def _serve_and_train(env: QAEnv, config: RunConfig) -> list[list[ScoredDataGroup]]:
    serving = asyncio.create_task(runtime.serve(env, config, handle_signals=False))
    batches = await asyncio.wait_for(_play_trainer(config.infra.api_url or "", STEPS), 60)
    outcome = await asyncio.wait_for(serving, 60)
    assert outcome.status == "completed", outcome
    return batches


def test_partial_credit_env_trainer_and_inference_test_report_one_accuracy(
    tmp_path: Path, partial_env_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with trajectory_api_process(tmp_path / "api.log") as api_url, fake_inference_server() as (inference_url, _):
        config = _run_config(run_dir, api_url, inference_url)
        env = make_env(load_env_class(str(partial_env_file)), config)
        assert isinstance(env, QAEnv)
        batches = asyncio.run(_serve_and_train(env, config))

        monkeypatch.setenv("HERMES_NB_ENV_PATH", str(partial_env_file.parent))
        asyncio.run(api.rl_select_environment("partial"))
        tested = asyncio.run(rl_test_inference(num_steps=2, group_size=GROUP, models=[f"{inference_url}/v1#m"]))

    rows = read_all_metrics(run_dir / ENV_METRICS_FILE)
    env_train = [r.values[keys.ENV_PERCENT_CORRECT] for r in rows if keys.ENV_PERCENT_CORRECT in r.values]
    env_rewards = [r.values[keys.ENV_REWARD_MEAN] for r in rows if keys.ENV_REWARD_MEAN in r.values]
    trainer_train = [batch_score_metrics(batch)[keys.TRAIN_PERCENT_CORRECT] for batch in batches]
    [model] = tested.results

    assert env_rewards and set(env_rewards) == {0.75}  # partial credit: every completion scored above zero
    assert env_train and set(env_train) == {0.5}
    assert len(trainer_train) == STEPS and set(trainer_train) == {0.5}
    assert (model.status, model.completions, model.accuracy) == ("ok", 2 * GROUP, 0.5)
    # Greedy answers "0": right on the held-out items whose answer is "0", a wrong digit (0.5) on the others.
    expected_eval = sum(item.answer == "0" for item in env.eval_items()) / len(env.eval_items())
    evals = [r.values[keys.EVAL_PERCENT_CORRECT] for r in rows if keys.EVAL_PERCENT_CORRECT in r.values]
    assert 0.0 < expected_eval < 1.0
    assert evals and evals == pytest.approx([expected_eval] * len(evals))


def test_is_correct_decides_what_the_environment_counts_evaluates_and_sends(
    tmp_path: Path, partial_env_file: Path
) -> None:
    partial = load_env_class(str(partial_env_file))

    class Lenient(partial):  # type: ignore[valid-type,misc]
        def is_correct(self, score: float) -> bool:
            return score >= 0.5  # a right-format answer counts

    async def one_group_then_evaluate(env: QAEnv) -> tuple[ScoredDataGroup | None, dict[str, float]]:
        try:
            group, _ = await env.collect_trajectories(env.train_item())
            return group, await env.evaluate()
        finally:
            await env.server.aclose()

    with fake_inference_server() as (inference_url, _):
        env = make_env(Lenient, _run_config(tmp_path, "http://127.0.0.1:9", inference_url))
        assert isinstance(env, QAEnv)
        group, metrics = asyncio.run(one_group_then_evaluate(env))

    assert group is not None
    assert sorted(group.scores) == [0.5, 1.0] and group.verdicts() == [True, True]
    counted = GroupStats()
    counted.record_scored(group.scores, group.verdicts())  # as the host counts every group it is handed
    assert counted.row()[keys.ENV_PERCENT_CORRECT] == 1.0 and metrics[keys.EVAL_PERCENT_CORRECT] == 1.0


# ---- the verdict on the wire -----------------------------------------------------------------------------


def _completions(texts: list[str]) -> list[SampledCompletion]:
    return [
        SampledCompletion(
            text=t, prompt_token_ids=[5, 6], token_ids=[7, 2], logprobs=[-0.1, -0.2], finish_reason="stop"
        )
        for t in texts
    ]


def test_a_stated_verdict_travels_in_the_per_item_overrides_atroposlib_passes_through() -> None:
    group = build_scored_group(_completions(["a", "b"]), [0.5, 0.5], correct=[True, False])
    assert group is not None
    assert group.overrides == [{CORRECT_OVERRIDE: True}, {CORRECT_OVERRIDE: False}]
    assert ScoredDataGroup.model_validate_json(group.model_dump_json()).verdicts() == [True, False]


def test_without_a_verdict_a_completion_is_correct_only_with_full_score() -> None:
    # What an environment written against atroposlib sends: scores only (here -1 / partial / full credit).
    group = ScoredDataGroup(tokens=[[1], [2], [3], [4]], masks=[[1], [2], [3], [4]], scores=[-1.0, 0.0, 0.5, 1.0])
    assert group.verdicts() == [False, False, False, True]
    assert [score_is_correct(s) for s in group.scores] == group.verdicts()


def test_a_verdict_that_is_not_true_or_false_falls_back_on_the_score() -> None:
    overrides = [{CORRECT_OVERRIDE: "yes"}, {"set_advantage_to_zero": True}]
    group = ScoredDataGroup(tokens=[[1], [2]], masks=[[1], [2]], scores=[0.5, 1.0], overrides=overrides)
    assert group.verdicts() == [False, True]


def test_an_environment_verdict_wins_over_the_score_for_the_trainer() -> None:
    stated = build_scored_group(_completions(["a", "b"]), [0.2, 0.0], correct=[True, True])
    assert stated is not None
    assert batch_score_metrics([stated])[keys.TRAIN_PERCENT_CORRECT] == 1.0
