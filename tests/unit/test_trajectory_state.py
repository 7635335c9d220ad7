"""The trajectory API's queue, buffering, batching and back-pressure, as plain synchronous state."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hermes_nb.protocol.trajectory import MASK_IGNORE, RegisterEnv, Registration, ScoredDataGroup
from hermes_nb.trajectory_api import batching
from hermes_nb.trajectory_api.state import ApiLimits, RequestRejected, TrajectoryState


def group(size: int, env_id: int | None = None, length: int = 3, first_token: int = 1) -> ScoredDataGroup:
    """``size`` sequences of ``length`` tokens; the first token is the prompt. Token ids tell groups apart."""
    tokens = [[first_token + i] * length for i in range(size)]
    masks = [[MASK_IGNORE, *seq[1:]] for seq in tokens]
    return ScoredDataGroup(tokens=tokens, masks=masks, scores=[float(i % 2) for i in range(size)], env_id=env_id)


def registered(batch_size: int = 8, max_token_len: int = 64, limits: ApiLimits | None = None) -> TrajectoryState:
    state = TrajectoryState(limits)
    state.register(Registration(batch_size=batch_size, max_token_len=max_token_len, num_steps=10))
    return state


def add_env(
    state: TrajectoryState, group_size: int, weight: float = 1.0, min_batch_allocation: float | None = None
) -> int:
    answer = state.register_env(
        RegisterEnv(
            max_token_length=64,
            desired_name="arith",
            group_size=group_size,
            weight=weight,
            min_batch_allocation=min_batch_allocation,
        )
    )
    assert answer.env_id is not None
    return answer.env_id


def snapshot(state: TrajectoryState) -> tuple[object, ...]:
    return (
        [[g.tokens for g in u.groups] for u in state.queue],
        {k: [g.tokens for g in v] for k, v in state.buffers.items()},
        state.stored_tokens,
        state.latest,
        state.current_step,
    )


# ---- batching ------------------------------------------------------------------------------------------------
def test_a_batch_is_exactly_batch_size_sequences_of_whole_groups_oldest_first() -> None:
    state = registered(batch_size=8)
    for first in (10, 20, 30):
        state.add_group(group(4, first_token=first))

    batch = state.next_batch()

    assert batch is not None
    assert [g.tokens[0][0] for g in batch] == [10, 20]
    assert sum(g.group_size for g in batch) == 8
    assert state.status().queue_size == 1


def test_too_little_data_gives_no_batch_and_no_step() -> None:
    state = registered(batch_size=8)
    state.add_group(group(4))

    assert state.next_batch() is None
    assert state.current_step == 0
    assert state.status().queue_size == 1


def test_each_served_batch_is_one_step_counted_from_starting_step() -> None:
    state = TrajectoryState()
    state.register(Registration(batch_size=4, max_token_len=64, num_steps=10, starting_step=5))
    for _ in range(2):
        state.add_group(group(4))

    assert state.next_batch() is not None
    assert state.next_batch() is not None
    assert state.next_batch() is None
    assert state.status().current_step == 7


def test_no_batch_before_the_trainer_registered() -> None:
    state = TrajectoryState()
    state.add_group(group(4))

    assert state.next_batch() is None
    assert state.status().queue_size == 1


def test_smaller_groups_pack_to_the_largest_size_as_atroposlib_does() -> None:
    # The 4 completes a pack first; the two 2s complete theirs later; a batch of 4 takes the first pack.
    assert batching.select_exact([2, 4, 2], 4) == [1]
    assert batching.packed_order([2, 4, 2]) == [1, 0, 2]


def test_a_batch_size_that_packs_cannot_fill_falls_back_to_an_exact_subset() -> None:
    # Packs of 4 reach 8 then 12; the lone 2 never packs. atroposlib would wait forever for 10.
    assert batching.select_exact([4, 4, 2], 10) == [0, 1, 2]
    assert batching.select_exact([4, 4], 10) is None


def test_subset_search_prefers_arrival_order_and_finds_non_greedy_sums() -> None:
    assert batching.subset_summing_to([1, 3, 2, 2], 4) == [0, 1]
    assert batching.subset_summing_to([2, 3, 3], 6) == [1, 2]
    assert batching.subset_summing_to([3, 3], 4) == []


# ---- buffering of odd-size groups ----------------------------------------------------------------------------
def test_a_group_smaller_than_its_env_group_size_waits_in_the_buffer() -> None:
    state = registered(batch_size=4)
    env = add_env(state, group_size=4)

    answer = state.add_group(group(2, env_id=env))

    assert (answer.status, answer.buffer_size) == ("buffered", 2)
    assert state.status().queue_size == 0
    assert state.next_batch() is None


def test_buffered_groups_that_combine_to_the_group_size_are_queued_together() -> None:
    state = registered(batch_size=4)
    env = add_env(state, group_size=4)
    state.add_group(group(3, env_id=env, first_token=10))
    state.add_group(group(3, env_id=env, first_token=20))  # 3 + 3 overshoots: both wait

    answer = state.add_group(group(1, env_id=env, first_token=30))

    assert (answer.status, answer.buffer_size) == ("buffered", 3)
    assert state.status().queue_size == 1
    batch = state.next_batch()
    assert batch is not None
    assert [g.tokens[0][0] for g in batch] == [10, 30]
    assert [g.tokens[0][0] for g in state.buffers[env]] == [20]


def test_groups_of_the_registered_size_skip_the_buffer() -> None:
    state = registered(batch_size=4)
    env = add_env(state, group_size=4)

    assert state.add_group(group(4, env_id=env)).status == "received"
    assert state.status().queue_size == 1


def test_a_group_larger_than_its_env_group_size_is_refused_as_it_could_never_combine() -> None:
    state = registered(batch_size=8)
    env = add_env(state, group_size=4)
    before = snapshot(state)

    with pytest.raises(RequestRejected, match=r"tokens: 8 sequences.*group_size 4") as caught:
        state.add_group(group(8, env_id=env))

    assert caught.value.status_code == 422
    assert snapshot(state) == before


def test_a_full_buffer_refuses_more_odd_groups() -> None:
    state = registered(batch_size=4, limits=ApiLimits(max_buffered_groups=2))
    env = add_env(state, group_size=4)
    state.add_group(group(3, env_id=env))
    state.add_group(group(3, env_id=env))
    before = snapshot(state)

    with pytest.raises(RequestRejected, match="waiting to combine") as caught:
        state.add_group(group(3, env_id=env))

    assert caught.value.status_code == 409
    assert snapshot(state) == before


# ---- environments: weights, minimum allocations, back-pressure --------------------------------------------
def test_env_weight_is_the_share_of_context_times_weight_among_connected_envs() -> None:
    state = registered()
    light = add_env(state, group_size=4, weight=1.0)
    heavy = add_env(state, group_size=4, weight=3.0)
    ignored = add_env(state, group_size=4, weight=-1.0)  # atroposlib's "ignore it"

    assert state.status_env(light).env_weight == pytest.approx(0.25)
    assert state.status_env(heavy).env_weight == pytest.approx(0.75)
    assert state.status_env(ignored).env_weight == pytest.approx(0.01)
    state.disconnect_env(heavy)
    assert state.status_env(light).env_weight == pytest.approx(1.0)


def test_a_minimum_allocation_reserves_part_of_every_batch() -> None:
    state = registered(batch_size=4)
    common = add_env(state, group_size=2)
    rare = add_env(state, group_size=2, min_batch_allocation=0.5)
    for _ in range(4):
        state.add_group(group(2, env_id=common))
    state.add_group(group(2, env_id=rare))

    batch = state.next_batch()

    assert batch is not None
    assert sorted(g.env_id for g in batch if g.env_id is not None) == [common, rare]


def test_an_env_with_a_minimum_and_no_data_holds_batches_until_it_disconnects() -> None:
    state = registered(batch_size=4)
    common = add_env(state, group_size=2)
    idle = add_env(state, group_size=2, min_batch_allocation=0.5)
    for _ in range(2):
        state.add_group(group(2, env_id=common))

    assert state.next_batch() is None
    state.disconnect_env(idle)
    assert state.next_batch() is not None


def test_status_env_back_pressure_numbers_follow_atroposlib() -> None:
    state = registered(batch_size=8)
    big = add_env(state, group_size=4)
    small = add_env(state, group_size=2, min_batch_allocation=0.25)
    for _ in range(2):
        state.add_group(group(4, env_id=big))
    for _ in range(3):
        state.add_group(group(2, env_id=small))

    seen_by_big = state.status_env(big)
    seen_by_small = state.status_env(small)

    # big: own 8 sequences + small's 6 rounded up to packs of 4 (8) less its reserve int(8 * 0.25) = 2.
    assert (seen_by_big.queue_size, seen_by_big.self_queue_size, seen_by_big.max_group_size) == (3, 2, 4)
    # small: own 6 + big's 8 (no reserve), in groups of 2.
    assert (seen_by_small.queue_size, seen_by_small.self_queue_size) == (7, 3)
    assert seen_by_big.unallocated_fraction == pytest.approx(0.75)
    assert state.status().queue_size == 5


def test_status_env_for_an_unknown_env_is_a_404_naming_env_id() -> None:
    state = registered()

    with pytest.raises(RequestRejected, match="env_id: no environment 3") as caught:
        state.status_env(3)
    assert caught.value.status_code == 404


# ---- registration ------------------------------------------------------------------------------------------
def test_register_env_before_the_trainer_is_told_to_wait() -> None:
    state = TrajectoryState()

    answer = state.register_env(RegisterEnv(max_token_length=64, desired_name="arith", group_size=4))

    assert answer.status == "wait for trainer to start"
    assert answer.env_id is None
    assert state.health().num_envs == 0


def test_register_env_returns_id_unique_name_and_the_trainer_settings() -> None:
    state = TrajectoryState()
    state.register(
        Registration(
            batch_size=8,
            max_token_len=64,
            num_steps=20,
            starting_step=3,
            checkpoint_dir="/ck",
            save_checkpoint_interval=5,
        )
    )

    first = state.register_env(RegisterEnv(max_token_length=64, desired_name="arith", group_size=4))
    second = state.register_env(RegisterEnv(max_token_length=64, desired_name="arith", group_size=4))

    assert (first.status, first.env_id, first.wandb_name) == ("success", 0, "arith_0")
    assert (second.env_id, second.wandb_name) == (1, "arith_1")
    assert (first.checkpoint_dir, first.starting_step, first.checkpoint_interval, first.num_steps) == ("/ck", 3, 5, 20)
    assert state.health().num_envs == 2


def test_register_env_with_a_group_larger_than_the_batch_is_refused() -> None:
    state = registered(batch_size=4)

    with pytest.raises(RequestRejected, match="group_size: 8 is larger than the trainer's batch_size 4"):
        state.register_env(RegisterEnv(max_token_length=64, desired_name="arith", group_size=8))
    assert state.envs == []


def test_a_second_trainer_registration_gets_an_id_but_keeps_the_first_settings() -> None:
    state = registered(batch_size=8)

    first_id = state.requesters[0]
    second_id = state.register(Registration(batch_size=2, max_token_len=64, num_steps=10))

    assert second_id != first_id
    assert state.info().batch_size == 8


def test_disconnect_marks_the_env_gone_and_an_unknown_id_fails_politely() -> None:
    state = registered()
    env = add_env(state, group_size=4)

    assert state.disconnect_env(env).status == "success"
    assert state.health().num_envs == 0
    unknown = state.disconnect_env(7)
    assert unknown.status == "failure"
    assert unknown.error is not None and "env_id" in unknown.error


def test_reset_forgets_registrations_queue_buffers_and_step() -> None:
    state = registered(batch_size=4)
    env = add_env(state, group_size=4)
    state.add_group(group(4, env_id=env))
    state.add_group(group(2, env_id=env))
    state.add_group(group(4))
    state.next_batch()

    state.reset()

    assert state.health().model_dump() == {
        "status": "ok",
        "trainer_registered": False,
        "num_envs": 0,
        "current_step": 0,
        "queue_size": 0,
        "held_sequences": 0,
        "max_queued_sequences": None,
    }
    assert (state.buffers, state.stored_tokens, state.latest) == ({}, 0, None)
    assert state.info().batch_size == -1


# ---- refusals leave everything unchanged --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (ScoredDataGroup(tokens=[[1], []], masks=[[1], []], scores=[0, 1]), r"tokens\[1\]: an empty sequence"),
        (group(2, length=65), r"tokens\[0\]: 65 tokens, longer than the trainer's max_token_len 64"),
        (group(5), r"tokens: 5 sequences in one group, above this API's limit of 4"),
    ],
    ids=["empty-sequence", "longer-than-max-token-len", "group-over-limit"],
)
def test_a_refused_group_changes_nothing(bad: ScoredDataGroup, message: str) -> None:
    state = registered(batch_size=4, limits=ApiLimits(max_group_size=4))
    state.add_group(group(2))
    before = snapshot(state)

    with pytest.raises(RequestRejected, match=message) as caught:
        state.add_group(bad)

    assert caught.value.status_code == 422
    assert snapshot(state) == before


def test_a_list_with_one_bad_group_queues_none_of_them() -> None:
    state = registered(batch_size=4)
    before = snapshot(state)

    with pytest.raises(RequestRejected, match=r"scored_data_list\[1\]\.tokens\[0\]: 65 tokens"):
        state.add_groups([group(2), group(2, length=65), group(2)])

    assert snapshot(state) == before


def test_a_list_is_queued_whole_and_reports_what_it_buffered() -> None:
    state = registered(batch_size=4)
    env = add_env(state, group_size=4)

    answer = state.add_groups([group(4, env_id=env), group(2, env_id=env), group(4)])

    assert (answer.groups_processed, answer.buffered, answer.last_buffer_size) == (3, 1, 2)
    assert state.status().queue_size == 2


def test_the_token_budget_refuses_data_the_trainer_cannot_keep_up_with() -> None:
    state = registered(batch_size=4, limits=ApiLimits(max_queued_tokens=20))
    state.add_group(group(4, length=3))  # 12 tokens
    before = snapshot(state)

    with pytest.raises(RequestRejected, match="the queue holds 12 tokens") as caught:
        state.add_group(group(4, length=3))

    assert caught.value.status_code == 503
    assert snapshot(state) == before
    state.next_batch()
    state.add_group(group(4, length=3))  # served tokens no longer count


# ---- the wire model --------------------------------------------------------------------------------------------
def test_masks_that_do_not_align_with_tokens_are_refused_by_the_model() -> None:
    with pytest.raises(ValidationError, match=r"masks\[0\]: has 2 values, tokens\[0\] has 3"):
        ScoredDataGroup(tokens=[[1, 2, 3]], masks=[[1, 2]], scores=[1.0])


def test_empty_per_sequence_lists_from_atroposlib_mean_absent() -> None:
    # atroposlib's default collect_trajectories sends [] for fields none of the members had.
    sent = {"tokens": [[1, 2]], "masks": [[-100, 2]], "scores": [1.0], "advantages": [], "overrides": []}

    parsed = ScoredDataGroup.model_validate(sent)

    assert (parsed.advantages, parsed.overrides) == (None, None)
