"""The policy-gradient objectives (``trainer.loss``), one definition each, registered once in ``OBJECTIVES``.

An objective is what sets it apart from the others: its surrogate (the per-token term whose negative is the loss,
from the importance ratio ``r``, the advantage ``A`` and the current logprob), where it clips (counted in the
clip-fraction diagnostics), the upper clip range it takes when ``trainer.epsilon_high`` is unset, and the training
backends that can compute it. What every objective shares (the ratio and its level, truncated importance sampling,
the KL penalty, the aggregation) is ``hermes_nb.trainer.step.losses.policy_loss_sum``.

Why here, below ``config.py``: the config's choices of ``trainer.loss`` and its checks, the Tinker route's refusals
(``hermes_nb.tinker.algorithms``) and the loss read this one table, and the config cannot import the trainer. The
surrogates need no import of torch: they only call methods of the tensors they are handed.

Adding an objective is one ``Objective``, named in ``OBJECTIVES`` (a shipped one) or given to ``register_objective``
(one from outside, as the tests' is), plus its case in ``tests/unit/test_losses_vs_trl.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# The training backends by ``trainer.backend``'s names (``hermes_nb.config.BackendName``; a test ties the two).
LOCAL, TINKER = "local", "tinker"


@dataclass(frozen=True)
class SurrogateInputs:
    """What a surrogate reads, all ``[B, T]`` (rows of a batch by positions): ``ratio_BT`` is current over
    sampling (or old) probability, already at its level (token or sequence) and 1 where nothing is trained."""

    ratio_BT: torch.Tensor
    advantages_BT: torch.Tensor
    logprobs_BT: torch.Tensor
    # The clip range of the step: the ratio's lower and upper distances from 1 (ppo), or a cap (cispo).
    epsilon_low: float
    epsilon_high: float


@dataclass(frozen=True)
class Surrogate:
    """The objective per position (the loss is its negative), and where it was clipped (bool ``[B, T]``; None:
    never on that side), as TRL counts it: only where the clip takes the gradient away or bounds it."""

    value_BT: torch.Tensor
    clipped_low_BT: torch.Tensor | None = None
    clipped_high_BT: torch.Tensor | None = None


@dataclass(frozen=True)
class Objective:
    """One objective. ``clips``: what ``epsilon``/``epsilon_high`` bound, in words (None: it clips nothing, so an
    ``epsilon_high`` is refused beside it); ``default_epsilon_high``: the upper range or cap when
    ``trainer.epsilon_high`` is unset (None: ``trainer.epsilon``); ``backends``: ``trainer.backend`` values that
    compute it."""

    name: str
    summary: str
    surrogate: Callable[[SurrogateInputs], Surrogate]
    clips: str | None
    backends: frozenset[str]
    default_epsilon_high: float | None = None


def _importance_sampling(x: SurrogateInputs) -> Surrogate:
    """``r * A``: the REINFORCE gradient corrected for the sampling policy being a step (or a temperature) away
    from the current one (Tinker's)."""
    return Surrogate(x.ratio_BT * x.advantages_BT)


def _ppo(x: SurrogateInputs) -> Surrogate:
    """``min(r * A, clip(r, 1 - epsilon, 1 + epsilon_high) * A)``: PPO's clipped surrogate as GRPO uses it
    (DeepSeekMath); ``epsilon_high > epsilon`` is DAPO's clip-higher."""
    ratio, advantages = x.ratio_BT, x.advantages_BT
    clipped = ratio.clamp(1.0 - x.epsilon_low, 1.0 + x.epsilon_high)
    return Surrogate(
        (ratio * advantages).minimum(clipped * advantages),
        clipped_low_BT=(ratio < 1.0 - x.epsilon_low) & (advantages < 0),
        clipped_high_BT=(ratio > 1.0 + x.epsilon_high) & (advantages > 0),
    )


def _cispo(x: SurrogateInputs) -> Surrogate:
    """``min(r, epsilon_high).detach() * A * logp`` (MiniMax-M1): the importance weight is capped and carries no
    gradient, so no token's gradient is clipped away. TRL's form; Tinker's ``cispo`` clips the weight on both
    sides to ``[1 - eps_low, 1 + eps_high]``."""
    ratio = x.ratio_BT
    weight = ratio.clamp(max=x.epsilon_high).detach()
    return Surrogate(
        weight * x.advantages_BT * x.logprobs_BT,
        clipped_high_BT=(ratio > x.epsilon_high) & (x.advantages_BT > 0),
    )


IMPORTANCE_SAMPLING = Objective(
    name="importance_sampling",
    summary="REINFORCE with the importance ratio",
    surrogate=_importance_sampling,
    clips=None,
    backends=frozenset({LOCAL, TINKER}),
)
PPO = Objective(
    name="ppo",
    summary="the clipped surrogate of PPO/GRPO",
    surrogate=_ppo,
    clips="the ratio, to [1 - epsilon, 1 + epsilon_high]",
    backends=frozenset({LOCAL, TINKER}),
)
CISPO = Objective(
    name="cispo",
    summary="clipped, detached importance weights; MiniMax-M1",
    surrogate=_cispo,
    clips="the importance weight, to at most epsilon_high",
    # Tinker's server offers no cispo: SkyRL 0.3.0 wires none, and the hosted one clips on both sides (above).
    backends=frozenset({LOCAL}),
    # ScaleRL's recommended cap of the importance weight.
    default_epsilon_high=5.0,
)

# Every objective by name, in the order the config lists them.
OBJECTIVES: dict[str, Objective] = {o.name: o for o in (IMPORTANCE_SAMPLING, PPO, CISPO)}


def register_objective(objective: Objective) -> Objective:
    """Add ``objective`` to the table; a name taken already is refused (two definitions of one name)."""
    if objective.name in OBJECTIVES:
        raise ValueError(f"objective {objective.name!r} is registered already")
    OBJECTIVES[objective.name] = objective
    return objective


def objective_names(backend: str | None = None) -> tuple[str, ...]:
    """The registered names, or those that ``backend`` computes."""
    return tuple(name for name, o in OBJECTIVES.items() if backend is None or backend in o.backends)


def objective(name: str) -> Objective:
    """The objective called ``name``; ``ValueError`` naming the registered ones when none is."""
    found = OBJECTIVES.get(name)
    if found is None:
        raise ValueError(f"loss_fn: {name!r} is not one of {', '.join(OBJECTIVES)}")
    return found
