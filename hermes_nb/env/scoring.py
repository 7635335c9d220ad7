"""Turning sampled completions and their scores into a ``ScoredDataGroup``: the token/mask/logprob convention."""

from __future__ import annotations

from collections.abc import Sequence

from hermes_nb.env.types import SampledCompletion
from hermes_nb.protocol.trajectory import CORRECT_OVERRIDE, MASK_IGNORE, PROMPT_LOGPROB, Message, ScoredDataGroup


def build_scored_group(
    completions: Sequence[SampledCompletion],
    scores: Sequence[float],
    *,
    ensure_scores_are_not_same: bool = False,
    correct: Sequence[bool] | None = None,
) -> ScoredDataGroup | None:
    """Prompt tokens are masked (``-100``, logprob placeholder ``1.0``); completion tokens are trained on.

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
    if ensure_scores_are_not_same and len(set(scores)) <= 1:
        return None
    tokens_G, masks_G, logprobs_G = [], [], []
    for completion in completions:
        prompt_len = len(completion.prompt_token_ids)
        tokens_G.append([*completion.prompt_token_ids, *completion.token_ids])
        masks_G.append([MASK_IGNORE] * prompt_len + list(completion.token_ids))
        logprobs_G.append([PROMPT_LOGPROB] * prompt_len + list(completion.logprobs or []))
    overrides_G = [{CORRECT_OVERRIDE: bool(c)} for c in correct] if correct is not None else None
    group = ScoredDataGroup(
        tokens=tokens_G,
        masks=masks_G,
        scores=[float(s) for s in scores],
        inference_logprobs=logprobs_G if all(c.logprobs is not None for c in completions) else None,
        overrides=overrides_G,
    )
    return group.as_test_only() if any(c.test_only for c in completions) else group


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
