"""The Atropos trajectory-API wire format.

Field names and shapes follow ``atroposlib.api.server`` so that an environment written for ``atroposlib``
talks to our API, and our trainer can train from an ``atroposlib run-api``. List suffixes name what a list is
indexed by: ``_G`` one per group member (sequence), ``_T`` one per token.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

# The mask value that marks a token as "not trained on" (prompt tokens), as in Atropos and HF's ignore_index.
MASK_IGNORE = -100
# Placeholder logprob for positions that were not sampled (prompt tokens): a real logprob is always <= 0.
PROMPT_LOGPROB = 1.0


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[Any]


class ScoredDataGroup(BaseModel):
    """One group of ``group_size`` completions of the same prompt, tokenized and scored.

    ``tokens[i]`` is prompt + completion of member ``i``; ``masks[i]`` is ``-100`` where the token is not trained
    on and the token id where it is; ``scores[i]`` the reward. ``inference_logprobs[i]`` (same length as
    ``tokens[i]``) holds the sampling policy's logprob of each trained token and ``1.0`` elsewhere.
    """

    model_config = ConfigDict(extra="allow")

    tokens: list[list[int]]
    masks: list[list[int]]
    scores: list[float]
    advantages: list[list[float]] | None = None
    ref_logprobs: list[list[float]] | None = None
    messages: list[list[Message]] | None = None
    generation_params: dict[str, Any] | None = None
    inference_logprobs: list[list[float]] | None = None
    overrides: list[dict[str, Any]] | None = None
    group_overrides: dict[str, Any] | None = None
    images: Any | None = None
    env_id: int | None = None

    @model_validator(mode="after")
    def _aligned(self) -> ScoredDataGroup:
        size = len(self.tokens)
        if size == 0:
            raise ValueError("tokens: a scored group needs at least one sequence")
        for field in ("masks", "scores", "advantages", "inference_logprobs", "overrides", "messages"):
            value = getattr(self, field)
            if value is not None and len(value) != size:
                raise ValueError(f"{field}: has {len(value)} entries, tokens has {size}; they must match")
        for field in ("masks", "advantages", "inference_logprobs"):
            rows = getattr(self, field)
            if rows is None:
                continue
            for i, (row, toks) in enumerate(zip(rows, self.tokens, strict=True)):
                if len(row) != len(toks):
                    raise ValueError(f"{field}[{i}]: has {len(row)} values, tokens[{i}] has {len(toks)}")
        return self

    @property
    def group_size(self) -> int:
        return len(self.tokens)


class Registration(BaseModel):
    """Sent by the trainer to ``/register``."""

    wandb_group: str = ""
    wandb_project: str = ""
    batch_size: int = Field(gt=0)
    max_token_len: int = Field(gt=0)
    checkpoint_dir: str = ""
    save_checkpoint_interval: int = 0
    starting_step: int = Field(default=0, ge=0)
    num_steps: int = Field(gt=0)


class RegisterEnv(BaseModel):
    """Sent by an environment to ``/register-env``."""

    max_token_length: int = Field(gt=0)
    desired_name: str
    weight: float = Field(default=1.0, gt=0)
    group_size: int = Field(default=1, gt=0)
    min_batch_allocation: float | None = None


class EnvIdentifier(BaseModel):
    env_id: int


class RegisterEnvResponse(BaseModel):
    status: str
    env_id: int | None = None
    wandb_name: str | None = None
    checkpoint_dir: str | None = None
    starting_step: int | None = None
    checkpoint_interval: int | None = None
    num_steps: int | None = None


class BatchResponse(BaseModel):
    batch: list[ScoredDataGroup] | None = None


class StatusResponse(BaseModel):
    current_step: int
    queue_size: int


class EnvStatusResponse(BaseModel):
    current_step: int
    queue_size: int
    unallocated_fraction: float = 0.0
    self_queue_size: int = 0
    max_group_size: int = 1
    env_weight: float = 1.0


class InfoResponse(BaseModel):
    batch_size: int
    max_token_len: int


class WandbInfo(BaseModel):
    group: str | None = None
    project: str | None = None
