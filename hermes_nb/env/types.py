"""The items an environment hands out. Atropos types an item as ``Any``; ``QAItem`` is the common case."""

from __future__ import annotations

from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

Item: TypeAlias = Any


class QAItem(BaseModel):
    """A prompt with a checkable answer: what every shipped environment generates."""

    model_config = ConfigDict(frozen=True)

    prompt: str
    answer: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class SampledCompletion(BaseModel):
    """One completion as the inference server sampled it: the exact token ids and their logprobs.

    From an endpoint that answers with text only (a hosted provider), the token ids are the run's tokenizer's
    reading of the prompt and the text, ``logprobs`` is ``None`` and ``test_only`` is set: a group built from
    such a completion can be scored and looked at, never trained on.
    """

    model_config = ConfigDict(frozen=True)

    text: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float] | None  # None: the endpoint sent none
    finish_reason: str
    test_only: bool = False  # token ids re-made from text, not the ones sampled


class SampledBatch(BaseModel):
    """One completion per prompt of a multi-prompt request, and the policy version that produced them all
    (``None`` when the server does not say)."""

    model_config = ConfigDict(frozen=True)

    completions: list[SampledCompletion]
    policy_version: int | None = None
