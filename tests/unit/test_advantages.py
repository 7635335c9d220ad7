"""Group-normalised advantages and the shifted training datums built from scored groups."""

from __future__ import annotations

import pytest

from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.trainer.step.advantages import group_data, has_signal, normalized_scores, token_advantages


def _group(scores: list[float], **extra: object) -> ScoredDataGroup:
    tokens = [[5, 6, 7, 8] for _ in scores]
    masks = [[-100, -100, 7, 8] for _ in scores]
    return ScoredDataGroup(tokens=tokens, masks=masks, scores=scores, **extra)


def test_all_equal_scores_give_zero_advantages() -> None:
    assert normalized_scores([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    data, _ = group_data(_group([0.5, 0.5]))
    assert not any(has_signal(d) for d in data)


def test_advantages_are_mean_centred_and_std_scaled() -> None:
    adv = normalized_scores([1.0, 0.0, 0.0, 1.0])
    assert adv == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)
    assert sum(normalized_scores([3.0, 1.0, 0.0])) == pytest.approx(0.0, abs=1e-9)


def test_set_advantage_to_zero_override_zeroes_one_member() -> None:
    group = _group([1.0, 0.0], overrides=[{"set_advantage_to_zero": True}, {}])
    rows = token_advantages(group)
    assert rows[0] == [0.0] * 4
    assert rows[1][0] < 0


def test_group_override_zeroes_the_whole_group() -> None:
    rows = token_advantages(_group([1.0, 0.0], group_overrides={"set_advantage_to_zero": True}))
    assert all(a == 0.0 for row in rows for a in row)


def test_sent_advantages_are_used_as_given() -> None:
    sent = [[0.0, 0.0, 0.3, 0.4], [0.0, 0.0, -0.1, -0.2]]
    assert token_advantages(_group([1.0, 0.0], advantages=sent)) == sent


def test_datum_is_shifted_by_one_with_mask_and_sampling_logprobs() -> None:
    group = _group([1.0, 0.0], inference_logprobs=[[1.0, 1.0, -0.1, -0.2], [1.0, 1.0, -0.3, -0.4]])
    data, sent = group_data(group)
    first = data[0]
    assert first.input_tokens_T == [5, 6, 7]
    assert first.target_tokens_T == [6, 7, 8]
    assert first.weights_T == [0.0, 1.0, 1.0]
    assert first.sampling_logprobs_T == [1.0, -0.1, -0.2]
    assert first.advantages_T == pytest.approx([1.0, 1.0, 1.0], abs=1e-5)
    assert sent == [True, True]


def test_sequences_without_trained_tokens_are_dropped() -> None:
    group = ScoredDataGroup(tokens=[[1, 2], [1, 2, 3]], masks=[[-100, -100], [-100, -100, 3]], scores=[1.0, 0.0])
    data, sent = group_data(group)
    assert len(data) == 1 and data[0].target_tokens_T == [2, 3]
    assert sent == [False]
