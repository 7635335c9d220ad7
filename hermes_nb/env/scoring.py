"""Turning sampled completions and their scores into a ``ScoredDataGroup``: the token/mask/logprob convention."""

from __future__ import annotations

from collections.abc import Sequence

from hermes_nb.env.types import SampledCompletion
from hermes_nb.protocol.trajectory import MASK_IGNORE, PROMPT_LOGPROB, ScoredDataGroup


def build_scored_group(
    completions: Sequence[SampledCompletion],
    scores: Sequence[float],
    *,
    ensure_scores_are_not_same: bool = False,
) -> ScoredDataGroup | None:
    """Prompt tokens are masked (``-100``, logprob placeholder ``1.0``); completion tokens are trained on.

    Returns ``None`` when ``ensure_scores_are_not_same`` and every score is equal: such a group has zero
    group-normalised advantage everywhere and would only cost trainer time.
    """
    if len(completions) != len(scores):
        raise ValueError(f"scores: got {len(scores)} for {len(completions)} completions; they must match")
    if ensure_scores_are_not_same and len(set(scores)) <= 1:
        return None
    tokens_G, masks_G, logprobs_G = [], [], []
    for completion in completions:
        prompt_len = len(completion.prompt_token_ids)
        tokens_G.append([*completion.prompt_token_ids, *completion.token_ids])
        masks_G.append([MASK_IGNORE] * prompt_len + list(completion.token_ids))
        logprobs_G.append([PROMPT_LOGPROB] * prompt_len + list(completion.logprobs))
    return ScoredDataGroup(
        tokens=tokens_G, masks=masks_G, scores=[float(s) for s in scores], inference_logprobs=logprobs_G
    )
