"""The records of the training data flow, defined once: what the loop hands a backend and what it gets back.

Shaped like Tinker's types (``Datum``, ``ForwardBackwardOutput``, ``AdamParams``) so the loop speaks the same
interface to the local torch backend and to the hosted service. Suffixes name what a list is indexed by:
``_T`` one per position of ``input_tokens_T`` (next-token alignment: position ``t`` predicts
``target_tokens_T[t]``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Datum(BaseModel):
    """One sequence to train on, self-contained: everything the loss needs, already shifted by one."""

    model_config = ConfigDict(frozen=True)

    input_tokens_T: list[int]
    target_tokens_T: list[int]
    # 1.0 where the target token is trained on (completion), 0.0 elsewhere (prompt, padding).
    weights_T: list[float]
    # Logprob of each target token under the policy that sampled it (only read where weights_T > 0).
    sampling_logprobs_T: list[float]
    advantages_T: list[float]
    # The trainer's own logprobs of the targets before the step's first optimizer pass: the ratio's denominator
    # when the sampler/trainer mismatch is corrected (LossConfig.importance_sampling_cap); None: sampling's.
    old_logprobs_T: list[float] | None = None
    # The frozen reference policy's logprobs of the targets, for the KL penalty (LossConfig.beta > 0).
    reference_logprobs_T: list[float] | None = None

    @model_validator(mode="after")
    def _aligned(self) -> Datum:
        size = len(self.input_tokens_T)
        if size == 0:
            raise ValueError("input_tokens_T: a datum needs at least one position")
        for name in (
            "target_tokens_T",
            "weights_T",
            "sampling_logprobs_T",
            "advantages_T",
            "old_logprobs_T",
            "reference_logprobs_T",
        ):
            if getattr(self, name) is not None and len(getattr(self, name)) != size:
                raise ValueError(f"{name}: has {len(getattr(self, name))} values, input_tokens_T has {size}")
        return self

    @property
    def num_trained_tokens(self) -> int:
        return sum(1 for w in self.weights_T if w > 0)


class LossConfig(BaseModel):
    """How ``hermes_nb.trainer.step.losses`` turns a batch into a loss: the trainer fields of the same names
    (``hermes_nb.config.TrainerConfig``, built by ``hermes_nb.trainer.step.loss_settings.loss_config_for``). Tinker's
    own service fixes ppo's clip range at 0.2 and aggregates by sum."""

    model_config = ConfigDict(frozen=True)

    clip_epsilon_low: float = Field(default=0.2, gt=0, lt=1)
    # The objective's upper clip range (ppo) or cap (cispo): hermes_nb.objectives.
    clip_epsilon_high: float = Field(default=0.2, gt=0)
    loss_type: Literal["dapo", "bnpo", "grpo", "dr_grpo"] = "dapo"
    importance_sampling_level: Literal["token", "sequence"] = "token"
    # The KL penalty: beta * estimator(logp, reference logp) per trained token, added to the loss (0 = off).
    beta: float = Field(default=0.0, ge=0)
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    # Truncated importance sampling: weight each token by min(exp(old - sampling), cap), detached (None = off).
    importance_sampling_cap: float | None = Field(default=None, gt=1)
    # dr_grpo's constant: the longest completion a sequence may have (the run's max_token_length).
    max_completion_length: int = Field(default=1, ge=1)


class ForwardBackwardOutput(BaseModel):
    """The loss over the whole batch (aggregated by ``LossConfig.loss_type``) and diagnostics (``ratio_mean``,
    ``clip_fraction_low``, ``entropy``, ``kl``, ...: ``hermes_nb.trainer.step.losses.LossStats.metrics``)."""

    loss: float
    num_trained_tokens: int
    metrics: dict[str, float] = Field(default_factory=dict)


class AdamParams(BaseModel):
    """Optimizer settings for one step (passed every step, as Tinker does, so a schedule is the caller's)."""

    model_config = ConfigDict(frozen=True)

    # 0 is a real step: the first of a warmup (hermes_nb.trainer.step.schedule), which moves Adam's moments only.
    learning_rate: float = Field(ge=0)
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = Field(default=0.0, ge=0)
    # Clip the global gradient norm to this before the step (0 = no clipping).
    max_grad_norm: float = Field(default=1.0, ge=0)


class OptimStepOutput(BaseModel):
    metrics: dict[str, float] = Field(default_factory=dict)


class SamplerHandle(BaseModel):
    """Weights published for sampling. ``policy`` is backend-specific (for ``local``, a state dict of fresh
    tensors for the sampler's model; for ``tinker``, a sampler path); ``version`` grows by one per publication."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    name: str
    version: int
    policy: Any = None
