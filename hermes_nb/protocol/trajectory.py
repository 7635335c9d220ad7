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
    # Required but nullable: atroposlib only checks that the key exists, and an OpenAI tool-call message has
    # ``"content": null``.
    content: str | list[Any] | None


# Optional fields with one entry per group member; ``masks`` and ``scores`` are required and never empty.
_PER_SEQUENCE_FIELDS = (
    "advantages",
    "ref_logprobs",
    "inference_logprobs",
    "overrides",
    "messages",
    "distill_token_ids",
    "distill_logprobs",
)


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
    # On-policy distillation (atroposlib): teacher top-k token ids and logprobs, [sequence][position][top_k].
    distill_token_ids: list[list[list[int]]] | None = None
    distill_logprobs: list[list[list[float]]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _empty_means_absent(cls, data: Any) -> Any:
        # atroposlib's default ``collect_trajectories`` sends ``[]`` for a per-sequence field none of the
        # members had (advantages, messages, overrides, ...); that means "absent", not "zero sequences".
        if not isinstance(data, dict):
            return data
        empty = [f for f in _PER_SEQUENCE_FIELDS if isinstance(data.get(f), list) and not data[f]]
        if not empty or not data.get("tokens"):
            return data
        return {**data, **dict.fromkeys(empty)}

    @model_validator(mode="after")
    def _aligned(self) -> ScoredDataGroup:
        size = len(self.tokens)
        if size == 0:
            raise ValueError("tokens: a scored group needs at least one sequence")
        for field in ("masks", "scores", *_PER_SEQUENCE_FIELDS):
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
    # Any value: atroposlib sends ``inference_weight = -1`` to mean "ignore it"; ``/status-env`` then reports
    # the minimum share. Only batch composition by ``min_batch_allocation`` affects which groups train.
    weight: float = 1.0
    group_size: int = Field(default=1, gt=0)
    # The least fraction of every batch this environment's groups should fill, as in atroposlib.
    min_batch_allocation: float | None = Field(default=None, ge=0.0, le=1.0)


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
    """``batch`` is ``None`` while too little data is queued. Before any ``/register`` atroposlib answers
    ``{"status": "error", "message": ..., "batch": []}``; ``status``/``message`` carry that."""

    batch: list[ScoredDataGroup] | None = None
    status: str | None = None
    message: str | None = None


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


class RegisterResponse(BaseModel):
    """``/register``: an id for this trainer process (atroposlib: ``uuid4().int``)."""

    uuid: int


class DisconnectEnvResponse(BaseModel):
    status: str
    error: str | None = None


class ScoredDataResponse(BaseModel):
    """``/scored_data``: ``received`` (queued), or ``buffered`` (a group of another size than the environment
    registered, held until groups combine to that size; ``buffer_size`` counts the sequences waiting)."""

    status: str
    buffer_size: int | None = None


class ScoredDataListResponse(BaseModel):
    status: str
    groups_processed: int
    buffered: int | None = None
    last_buffer_size: int | None = None


class HealthResponse(BaseModel):
    """``/health`` (hermes-nb only): what the run supervisor polls to know who registered."""

    status: str
    trainer_registered: bool
    num_envs: int
    current_step: int
    queue_size: int
