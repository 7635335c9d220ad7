"""The Atropos trajectory-API wire format.

Field names and shapes follow ``atroposlib.api.server`` so that an environment written for ``atroposlib``
talks to our API, and our trainer can train from an ``atroposlib run-api``. List suffixes name what a list is
indexed by: ``_G`` one per group member (sequence), ``_T`` one per token.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

# The mask value that marks a token as "not trained on" (prompt tokens), as in Atropos and HF's ignore_index.
MASK_IGNORE = -100
# Placeholder logprob for positions that were not sampled (prompt tokens): a real logprob is always <= 0.
PROMPT_LOGPROB = 1.0
# The environment's verdict on member ``i`` rides in ``overrides[i]["correct"]`` (true or false), not in a field
# of its own: atroposlib's run-api rebuilds each group from its named fields, so an extra field would be dropped
# on the way to the trainer, but it passes ``overrides`` through untouched and its trainers ignore unknown keys.
CORRECT_OVERRIDE = "correct"
# A member cut off by its token budget (``finish_reason: length``, or an episode that ran out of room) rides in
# ``overrides[i]["truncated"]`` (true; absent otherwise), for the reason ``correct`` does.
TRUNCATED_OVERRIDE = "truncated"
# A judge model's reason for member ``i``'s score (hermes_nb.env.judge) rides in ``overrides[i]["judge_reason"]``,
# for the reason ``correct`` does; the rollout viewer shows it beside the score.
JUDGE_REASON_OVERRIDE = "judge_reason"
# The reward of a correct completion in the convention of hermes-nb's and atroposlib's environments (1.0 right;
# 0.0 or -1.0 wrong). Only a completion without a verdict is judged by it, and then partial credit is not correct.
FULL_SCORE = 1.0
# A group whose token ids were re-made from text (an endpoint that answers with text only, as hosted providers do)
# is for testing, never for training: ``group_overrides["test_only"]`` marks it, and the trajectory API refuses it,
# the trainer drops it. It rides in ``group_overrides`` for the reason ``correct`` rides in ``overrides``.
TEST_ONLY_OVERRIDE = "test_only"
# Scores beyond this size are refused: the group's advantages square score differences, which overflow to inf
# (and the advantages to NaN) above ~1e154. No reward comes near 1e100.
MAX_ABS_SCORE = 1e100
# Without a registered vocabulary, token ids are still bounded: none comes near 2**31, and larger ones overflow
# the int32 tensors a trainer may build.
MAX_TOKEN_ID = 2**31 - 1


def scores_carry_signal(scores_G: list[float]) -> bool:
    """Whether a group's scores tell its members apart. Equal scores give every member the same (zero)
    group-normalised advantage, so such a group says nothing about which completion was better and moves no
    weight: environments may skip it, the trainer gives it zero advantages and replay leaves it out."""
    return len(set(scores_G)) > 1


def score_is_correct(score: float) -> bool:
    """The verdict on a completion whose environment stated none (e.g. one written against atroposlib): full
    marks, ``score >= FULL_SCORE``. Also ``BaseEnv.is_correct``'s default, so both sides judge alike."""
    return score >= FULL_SCORE


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    # Required but nullable: atroposlib only checks that the key exists, and an OpenAI tool-call message has
    # ``"content": null``.
    content: str | list[Any] | None

    @model_serializer(mode="wrap")
    def _keep_null_content(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A dump without None fields (``trajectories.jsonl.gz`` is written so) would drop a null ``content``,
        # and the record would no longer read back (nor pass atroposlib's check): the key always stays.
        data: dict[str, Any] = handler(self)
        data.setdefault("content", self.content)
        return data


def last_exchange(messages_M: list[Message]) -> dict[str, str | None]:
    """A conversation's last question and answer as text (``prompt``: the last user message before its final
    assistant message; ``completion``: that message's text, ``None`` where it has none, e.g. a tool call); both
    ``None`` when the conversation does not end with an assistant message."""
    if not messages_M or messages_M[-1].role != "assistant":
        return {"prompt": None, "completion": None}
    users = [m for m in messages_M[:-1] if m.role == "user"]
    return {
        "prompt": message_text(users[-1].content) if users else None,
        "completion": message_text(messages_M[-1].content),
    }


def message_text(content: str | list[Any] | None) -> str | None:
    """A message's content as text: OpenAI's content parts joined; ``None`` for none."""
    if isinstance(content, list):
        return "".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
    return content


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
        problem = _alignment_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self

    @property
    def group_size(self) -> int:
        return len(self.tokens)

    def verdicts(self) -> list[bool]:
        """Whether each member is correct: what "correct" means for every metric and report.

        The environment's verdict ``overrides[i]["correct"]`` when it stated one (``true``/``false``; any other
        value counts as none), else ``score_is_correct(scores[i])``.
        """
        overrides_G = self.overrides or [{}] * len(self.scores)
        verdicts_G = []
        for score, overrides in zip(self.scores, overrides_G, strict=True):
            stated = overrides.get(CORRECT_OVERRIDE)
            verdicts_G.append(stated if isinstance(stated, bool) else score_is_correct(score))
        return verdicts_G

    def truncations(self, max_token_len: int) -> list[bool]:
        """Whether each member was cut off before it ended: the environment said so
        (``overrides[i]["truncated"]``), or the sequence fills the trainer's whole ``max_token_len`` (what an
        environment that says nothing, e.g. one written against atroposlib, leaves to go by)."""
        overrides_G = self.overrides or [{}] * len(self.tokens)
        return [
            overrides.get(TRUNCATED_OVERRIDE) is True or len(tokens_T) >= max_token_len
            for tokens_T, overrides in zip(self.tokens, overrides_G, strict=True)
        ]

    def is_test_only(self) -> bool:
        """Whether this group was built from re-tokenized text (``TEST_ONLY_OVERRIDE``): never trained on."""
        return bool(self.group_overrides and self.group_overrides.get(TEST_ONLY_OVERRIDE) is True)

    def overlong_sequence(self, max_token_len: int) -> tuple[int, int] | None:
        """``(index, length)`` of the first sequence longer than ``max_token_len``, the trainer's limit; None when
        every sequence fits. The environment skips such a group and the trajectory API refuses it."""
        for index, tokens_T in enumerate(self.tokens):
            if len(tokens_T) > max_token_len:
                return index, len(tokens_T)
        return None

    def as_test_only(self) -> ScoredDataGroup:
        """This group marked test-only (a copy; other group overrides are kept)."""
        return self.model_copy(update={"group_overrides": {**(self.group_overrides or {}), TEST_ONLY_OVERRIDE: True}})


def _alignment_problem(group: ScoredDataGroup) -> str | None:
    size = len(group.tokens)
    if size == 0:
        return "tokens: a scored group needs at least one sequence"
    for field in ("masks", "scores", *_PER_SEQUENCE_FIELDS):
        value = getattr(group, field)
        if value is not None and len(value) != size:
            return f"{field}: has {len(value)} entries, tokens has {size}; they must match"
    for field in ("masks", "advantages", "inference_logprobs"):
        rows = getattr(group, field)
        if rows is None:
            continue
        for i, (row, toks) in enumerate(zip(rows, group.tokens, strict=True)):
            if len(row) != len(toks):
                return f"{field}[{i}]: has {len(row)} values, tokens[{i}] has {len(toks)}"
    return None


def malformed_reason(group: ScoredDataGroup, vocab_size: int | None = None) -> str | None:
    """Why the trainer must not train on ``group``, naming the field; ``None`` when nothing is wrong.

    What the model's own validation leaves open: its lengths again (an environment may change a group after
    building it), empty sequences, scores that are not finite numbers (or so large that the advantages overflow),
    token ids outside ``[0, vocab_size)`` (an embedding lookup out of range kills the trainer; without a
    vocabulary, above ``MAX_TOKEN_ID``) and masks that train nothing (every value
    ``MASK_IGNORE``: such a group costs a step's compute and teaches nothing, so it is a bug in the environment).
    Both the environment runtime (before posting) and the trajectory API (before queueing) ask it.
    """
    aligned = _alignment_problem(group)
    if aligned is not None:
        return aligned
    for i, score in enumerate(group.scores):
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            return f"scores[{i}]: {score!r} is not a finite number"
        if abs(score) > MAX_ABS_SCORE:
            return f"scores[{i}]: {score!r} is beyond +-{MAX_ABS_SCORE:g}; the group's advantages would overflow"
    for i, seq in enumerate(group.tokens):
        if not seq:
            return f"tokens[{i}]: an empty sequence; each needs at least one token"
    return _token_problem(group.tokens, vocab_size) or _untrained_problem(group.masks)


def _token_problem(tokens_G: list[list[int]], vocab_size: int | None) -> str | None:
    try:
        # Builtin min/max run at C speed: 64 sequences of 8k tokens take ~10 ms, not a Python loop per token.
        lowest, highest = min(map(min, tokens_G)), max(map(max, tokens_G))
    except TypeError:
        return "tokens: every token id must be an integer"
    if lowest < 0:
        return f"tokens: token id {lowest} is negative; ids are in [0, vocab size)"
    if vocab_size is not None and highest >= vocab_size:
        return f"tokens: token id {highest} is out of the trained model's vocabulary (ids are in [0, {vocab_size}))"
    if highest > MAX_TOKEN_ID:
        return f"tokens: token id {highest} is larger than any vocabulary (at most {MAX_TOKEN_ID})"
    return None


def _untrained_problem(masks_G: list[list[int]]) -> str | None:
    for row in masks_G:
        if row and (min(row) != MASK_IGNORE or max(row) != MASK_IGNORE):
            return None
    return f"masks: every value is {MASK_IGNORE} (not trained on); the group would train nothing"


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
    # hermes-nb only (atroposlib ignores it): the rows of the trained model's token embedding. The API refuses
    # groups with token ids at or above it, which would crash the trainer, and tells environments in ``/info``.
    vocab_size: int | None = Field(default=None, gt=0)


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
    # hermes-nb only: sequences the API still takes before its cap (``--max-queued-sequences``) refuses posts
    # with 503; an environment keeps its groups in flight within it. ``None``: no cap (atroposlib's API).
    queue_room: int | None = None


class InfoResponse(BaseModel):
    batch_size: int
    max_token_len: int
    # hermes-nb only: ``Registration.vocab_size`` when the trainer sent one.
    vocab_size: int | None = None


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
    # Sequences held (queued + buffered to combine) and the cap on them; ``None``: no cap.
    held_sequences: int = 0
    max_queued_sequences: int | None = None
