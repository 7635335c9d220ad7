"""Merging concurrent calls: what shares a request, what does not, and how failures and cancellations reach
exactly the callers they concern."""

from __future__ import annotations

import asyncio

import pytest

from hermes_nb.env.coalesce import Coalescer


class Recorder:
    """A flush that records each request and answers each argument with its double (or fails on request)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.requests: list[tuple[str, list[int]]] = []
        self.delay = delay

    async def flush(self, key: str, arguments: list[int]) -> list[int | BaseException]:
        self.requests.append((key, arguments))
        await asyncio.sleep(self.delay)
        if key == "broken":
            raise RuntimeError("the whole request failed")
        return [ValueError(f"bad {a}") if a < 0 else 2 * a for a in arguments]


def test_calls_in_the_same_turn_with_the_same_key_share_one_request() -> None:
    recorder = Recorder()

    async def scenario() -> list[int]:
        merged = Coalescer(recorder.flush, max_items=10)
        return await asyncio.gather(*(merged.submit("k", i) for i in range(5)))

    assert asyncio.run(scenario()) == [0, 2, 4, 6, 8]
    assert recorder.requests == [("k", [0, 1, 2, 3, 4])]


def test_different_keys_and_later_turns_get_their_own_requests() -> None:
    recorder = Recorder()

    async def scenario() -> None:
        merged = Coalescer(recorder.flush, max_items=10)
        await asyncio.gather(merged.submit("a", 1), merged.submit("b", 2), merged.submit("a", 3))
        await merged.submit("a", 4)

    asyncio.run(scenario())
    assert sorted(recorder.requests) == [("a", [1, 3]), ("a", [4]), ("b", [2])]


def test_a_full_request_leaves_at_once_and_the_rest_follow() -> None:
    recorder = Recorder()

    async def scenario() -> list[int]:
        merged = Coalescer(recorder.flush, max_items=3)
        return await asyncio.gather(*(merged.submit("k", i) for i in range(7)))

    assert asyncio.run(scenario()) == [2 * i for i in range(7)]
    assert [arguments for _, arguments in recorder.requests] == [[0, 1, 2], [3, 4, 5], [6]]


def test_a_failed_item_fails_only_its_caller_and_a_failed_request_fails_all_of_its_callers() -> None:
    recorder = Recorder()

    async def scenario() -> tuple[list[int | BaseException], list[int | BaseException]]:
        merged = Coalescer(recorder.flush, max_items=10)
        items = await asyncio.gather(*(merged.submit("k", i) for i in (1, -1, 2)), return_exceptions=True)
        whole = await asyncio.gather(*(merged.submit("broken", i) for i in (1, 2)), return_exceptions=True)
        return items, whole

    items, whole = asyncio.run(scenario())
    assert items[0] == 2 and items[2] == 4
    assert isinstance(items[1], ValueError) and str(items[1]) == "bad -1"
    assert all(isinstance(outcome, RuntimeError) for outcome in whole)


def test_a_cancelled_caller_does_not_disturb_the_others_in_its_request() -> None:
    recorder = Recorder(delay=0.05)

    async def scenario() -> list[int | BaseException]:
        merged = Coalescer(recorder.flush, max_items=10)
        tasks = [asyncio.create_task(merged.submit("k", i)) for i in range(3)]
        await asyncio.sleep(0.01)  # the request is in flight
        tasks[1].cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    first, cancelled, last = asyncio.run(scenario())
    assert (first, last) == (0, 4)
    assert isinstance(cancelled, asyncio.CancelledError)
    assert recorder.requests == [("k", [0, 1, 2])]


@pytest.mark.parametrize("max_items", [1, 2])
def test_no_request_carries_more_than_max_items(max_items: int) -> None:
    recorder = Recorder()

    async def scenario() -> None:
        merged = Coalescer(recorder.flush, max_items=max_items)
        await asyncio.gather(*(merged.submit("k", i) for i in range(4)))

    asyncio.run(scenario())
    assert all(len(arguments) <= max_items for _, arguments in recorder.requests)
    assert sorted(a for _, arguments in recorder.requests for a in arguments) == [0, 1, 2, 3]
