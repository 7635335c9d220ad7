"""How an OpenEnv episode's per-step rewards become its score.

OpenEnv sends a reward with every observation (``None`` where a step has none). The score of an episode is one of

- ``sum`` (the default): every step's reward counts once. It is the return of the episode undiscounted, which is
  what a task that rewards its end alone (most text tasks) and one that pays along the way both mean by "how well
  it went"; a group compares its members' sums.
- ``last``: the reward of the step that ended the episode, for environments whose final reward already sums up.
- ``discounted``: ``sum(discount**t * r_t)``, for environments that should prefer a shorter path to the same end.

A reward that is not a real number (a string, ``NaN``, infinity) is refused with the step that sent it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from hermes_nb.errors import HermesNBError

RewardAggregation = Literal["sum", "last", "discounted"]


class RewardError(HermesNBError):
    """An OpenEnv server sent a reward that is not a real number."""


def checked_reward(value: object, where: str) -> float | None:
    """``value`` as a reward: ``None`` (no reward at this step) or a finite float; ``RewardError`` naming ``where``
    otherwise. A bool is refused too: OpenEnv's ``Observation`` allows one, but no score is a truth value."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RewardError(f"{where}: the reward {value!r} is not a number (OpenEnv sends a float, or null for none)")
    return float(value)


def episode_score(rewards: Sequence[float], how: RewardAggregation, discount: float) -> float:
    """The score of an episode whose steps sent ``rewards`` (in order; steps without one left out); 0.0 for none."""
    if not rewards:
        return 0.0
    if how == "last":
        return rewards[-1]
    if how == "discounted":
        return sum(discount**step * reward for step, reward in enumerate(rewards))
    return sum(rewards)
