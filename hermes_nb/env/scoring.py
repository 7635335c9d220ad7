"""Turning sampled completions and their scores into a ``ScoredDataGroup``: the token/mask/logprob convention.

A member of a group is a ``SampledCompletion`` (one prompt, one completion: the prompt is masked, the completion
trained on) or a ``TrainedSequence``, which says for itself which tokens were sampled (a multi-turn episode:
``hermes_nb.env.episodes``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hermes_nb.env.types import SampledCompletion
from hermes_nb.protocol.inference import ChatMessage
from hermes_nb.protocol.trajectory import (
    CORRECT_OVERRIDE,
    MASK_IGNORE,
    PROMPT_LOGPROB,
    TRUNCATED_OVERRIDE,
    Message,
    ScoredDataGroup,
    scores_carry_signal,
)


@dataclass(frozen=True)
class TrainedSequence:
    """One member of a group as the trainer gets it. ``masks_T`` holds the token id where the token was sampled
    (trained on) and ``MASK_IGNORE`` elsewhere; ``logprobs_T`` the sampling logprob of each sampled token and
    ``PROMPT_LOGPROB`` elsewhere (``None``: the endpoint sent none); ``test_only``: token ids re-made from text;
    ``truncated``: cut off by its token budget before it ended (``trainer.mask_truncated_completions``)."""

    tokens_T: list[int]
    masks_T: list[int]
    logprobs_T: list[float] | None
    test_only: bool = False
    truncated: bool = False

    @classmethod
    def from_completion(cls, completion: SampledCompletion) -> TrainedSequence:
        """The prompt masked, the completion trained on."""
        prompt_len = len(completion.prompt_token_ids)
        logprobs = completion.logprobs
        return cls(
            tokens_T=[*completion.prompt_token_ids, *completion.token_ids],
            masks_T=[MASK_IGNORE] * prompt_len + list(completion.token_ids),
            logprobs_T=None if logprobs is None else [PROMPT_LOGPROB] * prompt_len + list(logprobs),
            test_only=completion.test_only,
            truncated=completion.finish_reason == "length",
        )


GroupMember = SampledCompletion | TrainedSequence


def build_scored_group(
    completions: Sequence[GroupMember],
    scores: Sequence[float],
    *,
    ensure_scores_are_not_same: bool = False,
    correct: Sequence[bool] | None = None,
) -> ScoredDataGroup | None:
    """Prompt tokens are masked (``-100``, logprob placeholder ``1.0``); completion tokens are trained on (an
    episode's ``TrainedSequence`` says which of its tokens were sampled).

    ``correct`` is the environment's verdict on each completion, sent with the group (``overrides[i]["correct"]``)
    so that the trainer counts what the environment counts; without it readers judge by the score
    (``hermes_nb.protocol.trajectory.score_is_correct``). Returns ``None`` when ``ensure_scores_are_not_same`` and
    every score is equal: such a group has zero group-normalised advantage everywhere and would only cost trainer
    time. A group with a completion whose token ids were re-made from text (``SampledCompletion.test_only``) is
    marked test-only (never trained on), and sampling logprobs are sent only when every completion has them.
    """
    if len(completions) != len(scores):
        raise ValueError(f"scores: got {len(scores)} for {len(completions)} completions; they must match")
    if correct is not None and len(correct) != len(completions):
        raise ValueError(f"correct: got {len(correct)} for {len(completions)} completions; they must match")
    if ensure_scores_are_not_same and not scores_carry_signal([float(s) for s in scores]):
        return None
    members = [c if isinstance(c, TrainedSequence) else TrainedSequence.from_completion(c) for c in completions]
    logprobs_G = [m.logprobs_T for m in members]
    group = ScoredDataGroup(
        tokens=[m.tokens_T for m in members],
        masks=[m.masks_T for m in members],
        scores=[float(s) for s in scores],
        inference_logprobs=[lp for lp in logprobs_G if lp is not None] if None not in logprobs_G else None,
        overrides=_overrides(members, correct),
    )
    return group.as_test_only() if any(m.test_only for m in members) else group


def _overrides(members: Sequence[TrainedSequence], correct: Sequence[bool] | None) -> list[dict[str, bool]] | None:
    """Each member's verdict and, only where it was cut off, ``truncated``; None when there is neither."""
    truncated = [m.truncated for m in members]
    if correct is None and not any(truncated):
        return None
    verdicts = [{CORRECT_OVERRIDE: bool(c)} for c in correct] if correct is not None else [{} for _ in members]
    return [{**v, TRUNCATED_OVERRIDE: True} if cut else v for v, cut in zip(verdicts, truncated, strict=True)]


def with_single_turn_messages(
    group: ScoredDataGroup | None, prompt: str, completions: Sequence[SampledCompletion]
) -> ScoredDataGroup | None:
    """``group`` with ``messages`` filled as ``[user prompt, assistant completion]`` per member: the decoded text
    recorded with the trained batch, which the rollout viewer (``rl_get_samples``) shows. Training ignores it."""
    if group is None:
        return None
    messages_G = [
        [Message(role="user", content=prompt), Message(role="assistant", content=c.text)] for c in completions
    ]
    return group.model_copy(update={"messages": messages_G})


def with_episode_messages(
    group: ScoredDataGroup | None, conversations: Sequence[Sequence[ChatMessage]]
) -> ScoredDataGroup | None:
    """``group`` with ``messages`` filled with each member's conversation: tool calls on the assistant turns, tool
    results as ``tool`` messages with their call's id (what the rollout viewer shows). Training ignores it."""
    if group is None:
        return None
    messages_G = [[_message(m) for m in conversation] for conversation in conversations]
    return group.model_copy(update={"messages": messages_G})


def _message(message: ChatMessage) -> Message:
    # ``content`` stays even when null (an assistant turn of tool calls only): the wire format requires the key.
    return Message.model_validate({**message.model_dump(mode="json", exclude_none=True), "content": message.content})
