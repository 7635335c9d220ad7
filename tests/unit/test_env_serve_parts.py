"""The parts of the serve loop, each on its own: back-pressure (``workers.py``), the evaluation schedule
(``evaluation.py``) and the faults that end a run. No API and no inference server: nothing here sends a request."""

from __future__ import annotations

import asyncio

from hermes_nb.config import InfraConfig, RunConfig, WandbConfig
from hermes_nb.env.base import BaseEnv
from hermes_nb.env.types import Item, QAItem
from hermes_nb.env_host.evaluation import EvalSchedule
from hermes_nb.env_host.loading import make_env
from hermes_nb.env_host.registration import RunProgress
from hermes_nb.env_host.step_metrics import StepMetrics
from hermes_nb.env_host.trajectory_link import TrajectoryLink
from hermes_nb.env_host.workers import Workers
from hermes_nb.errors import EnvironmentGone
from hermes_nb.protocol.trajectory import ScoredDataGroup

GROUP = 2
BATCH = 4
# Nothing listens here: a part that sent a request would fail the test.
NOWHERE = "http://127.0.0.1:9"


class EvalCountingEnv(BaseEnv):
    """An environment whose evaluation only records the step it ran at."""

    name = "eval-counting"

    async def get_next_item(self) -> Item:
        return QAItem(prompt="q=", answer="0")

    async def collect_trajectories(self, item: Item) -> tuple[ScoredDataGroup | None, list[Item]]:
        return None, []

    async def evaluate(self, *args: object, **kwargs: object) -> dict[str, float]:
        self.evaluated_at = [*getattr(self, "evaluated_at", []), self.curr_step]
        return {}


def counting_env(**env: object) -> BaseEnv:
    values = {"group_size": GROUP, "batch_size": BATCH, "max_num_workers": 8, "max_batches_offpolicy": 2, **env}
    infra = InfraConfig(run_id="t1", api_url=NOWHERE, inference_url=NOWHERE)
    return make_env(EvalCountingEnv, RunConfig(env=values, infra=infra, wandb=WandbConfig(mode="disabled")))


def workers_for(env: BaseEnv, progress: RunProgress) -> Workers:
    return Workers(env, TrajectoryLink(NOWHERE), progress, StepMetrics(env, None), asyncio.Event())


def test_no_worker_starts_while_the_api_queue_holds_max_batches_offpolicy_batches() -> None:
    progress = RunProgress(step=0, total_steps=10, batch_size=BATCH, max_token_len=64)
    workers = workers_for(counting_env(), progress)
    assert workers.budget() == 4  # two batches of 4 sequences, in groups of 2
    progress.queue_groups = 3  # 6 sequences queued: room for one more group
    assert workers.budget() == 1
    progress.queue_groups = 4
    assert workers.budget() == 0


def test_the_api_cap_bounds_the_groups_in_flight() -> None:
    progress = RunProgress(step=0, total_steps=10, batch_size=BATCH, max_token_len=64, queue_room=3)
    assert workers_for(counting_env(), progress).budget() == 1  # 3 sequences of room take one group of 2


def test_no_worker_starts_once_the_queue_holds_what_the_remaining_steps_need() -> None:
    progress = RunProgress(step=9, total_steps=10, batch_size=BATCH, max_token_len=64, queue_groups=2)
    assert workers_for(counting_env(), progress).budget() == 0


def test_a_worker_that_finds_the_environment_gone_ends_the_run_at_once() -> None:
    async def scenario() -> str | None:
        env = counting_env(max_consecutive_failures=5)
        workers = workers_for(env, RunProgress(step=0, total_steps=10, batch_size=BATCH, max_token_len=64))

        async def gone() -> None:
            raise EnvironmentGone("the environment's server died")

        task = asyncio.create_task(gone())
        await asyncio.gather(task, return_exceptions=True)
        workers.tasks[task] = QAItem(prompt="q=", answer="0")
        return workers.reap()

    error = asyncio.run(scenario())
    assert error == "EvalCountingEnv: the environment's server died"


def test_an_evaluation_starts_each_time_the_trainer_crosses_steps_per_eval() -> None:
    async def scenario() -> list[int]:
        env = counting_env(steps_per_eval=3)
        schedule = EvalSchedule(env, StepMetrics(env, None), asyncio.Event())
        for step in range(1, 8):
            env.curr_step = step
            schedule.maybe_start(step)
            if schedule.task is not None:
                await schedule.task
        return list(getattr(env, "evaluated_at", []))

    assert asyncio.run(scenario()) == [3, 6]
