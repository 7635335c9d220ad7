"""2-digit addition as an OpenEnv environment, for ``bench/env_overhead.py``: the native ``arithmetic`` task
(``operation: add``, ``digits: 2``) in OpenEnv's shape, so the two differ only in the framework around the task.

Episode: ``reset(seed)`` draws ``a + b`` (0-99 each, as ``arithmetic`` does) from the seed and answers an
``AdditionObservation`` whose ``prompt`` is ``"<a>+<b>="``; one ``AnswerAction`` (``message``) ends the episode with
reward 1.0 when it is exactly the sum (surrounding whitespace ignored), else 0.0. No MCP tools, one step.
"""

from __future__ import annotations

import random
from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

# Operands of at most two digits, as arithmetic's default config draws them.
HIGH = 99
# Sessions one server holds at once: the bench's runs open group_size x max_num_workers (8 x 4).
MAX_CONCURRENT_ENVS = 64


class AnswerAction(Action):
    message: str = Field(description="The sum, in decimal.")


class AdditionObservation(Observation):
    prompt: str = Field(default="", description="The problem, or whether the answer was right.")


class AdditionEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)
        self._answer = ""

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> AdditionObservation:
        rng = random.Random(seed)
        a, b = rng.randint(0, HIGH), rng.randint(0, HIGH)
        self._answer = str(a + b)
        self._state = State(episode_id=episode_id, step_count=0)
        return AdditionObservation(prompt=f"{a}+{b}=", reward=0.0, done=False)

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> AdditionObservation:
        self._state.step_count += 1
        correct = isinstance(action, AnswerAction) and action.message.strip() == self._answer
        return AdditionObservation(prompt="correct" if correct else "wrong", reward=float(correct), done=True)

    @property
    def state(self) -> State:
        return self._state


app = create_app(
    AdditionEnvironment,
    AnswerAction,
    AdditionObservation,
    env_name="addition_openenv",
    max_concurrent_envs=MAX_CONCURRENT_ENVS,
)
