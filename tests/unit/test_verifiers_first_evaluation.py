"""A verifiers run's first groups wait for its first evaluation: the host runs that one alongside them, and
verifiers' slow held-out episodes otherwise straddled the trainer's first steps (credited to step 0). Groups
collected without an evaluation (``process``, ``rl_test_inference``) never wait."""

from __future__ import annotations

import asyncio
from typing import Any

from hermes_nb.frameworks.verifiers.episode_env import VerifiersEnv
from hermes_nb.frameworks.verifiers.settings import VerifiersSettings

# Long enough for a group that does not wait to have started playing.
SETTLE_S = 0.05


class GroupPlayed(Exception):
    pass


class ProbeEnv(VerifiersEnv):
    """An evaluation that lasts until released; a group that records when it starts playing, then stops."""

    def __init__(self) -> None:
        super().__init__(VerifiersSettings())
        self.release = asyncio.Event()
        self.order: list[str] = []

    async def _evaluate(self) -> dict[str, float]:
        await self.release.wait()
        self.order.append("evaluated")
        return {}

    async def episodes(self, *args: Any, **kwargs: Any) -> list[Any]:
        self.order.append("group played")
        raise GroupPlayed


async def first_evaluation_then_a_group() -> list[str]:
    env = ProbeEnv()
    evaluation = asyncio.create_task(env.evaluate())
    await asyncio.sleep(0)  # the host starts the evaluation first
    group = asyncio.create_task(env.collect_trajectories(None))
    await asyncio.sleep(SETTLE_S)
    env.release.set()
    await evaluation
    await asyncio.gather(group, return_exceptions=True)
    return env.order


async def a_group_alone() -> list[str]:
    env = ProbeEnv()
    await asyncio.gather(asyncio.wait_for(env.collect_trajectories(None), 10), return_exceptions=True)
    return env.order


def test_the_first_groups_play_once_the_first_evaluation_is_over() -> None:
    assert asyncio.run(first_evaluation_then_a_group()) == ["evaluated", "group played"]


def test_groups_collected_without_an_evaluation_do_not_wait() -> None:
    assert asyncio.run(a_group_alone()) == ["group played"]
