"""An engine with ``sampler_process=True`` generates in a forked child: the same tokens and logprobs as the
engine's own thread, from the weights published last, a batch's failure raised to its requests, a child that dies
one warning with sampling going on in the thread, no pipe or socket of the parent's held open by the child, and no
child left after close."""

from __future__ import annotations

import asyncio
import logging
import os
import select
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
import torch

from hermes_nb.inference.contract import Policy
from hermes_nb.inference.engine import InferenceEngine
from hermes_nb.inference.sampler import SampleRow
from hermes_nb.system.home import embedded_base_model_dir

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def base() -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = str(embedded_base_model_dir())
    return AutoModelForCausalLM.from_pretrained(directory).eval(), AutoTokenizer.from_pretrained(directory)


def fresh_policy(base: tuple[Any, Any]) -> Policy:
    """A copy of the base model, so that weights one test publishes never reach another's."""
    import copy

    model, tokenizer = base
    return Policy(model=copy.deepcopy(model), tokenizer=tokenizer, version=0, name="base")


def rows(tokenizer: Any) -> list[SampleRow]:
    ids = list(tokenizer("23+45=")["input_ids"])
    group = [SampleRow(prompt=ids, max_tokens=5, stop_strings=("\n",)) for _ in range(16)]
    return [*group, SampleRow(prompt=ids, max_tokens=5, temperature=0.0, stop_strings=("\n",))]


@pytest.fixture
def engines() -> Iterator[list[InferenceEngine]]:
    made: list[InferenceEngine] = []
    yield made
    for engine in made:
        engine.close()


def engine_with(engines: list[InferenceEngine], policy: Policy, *, sampler_process: bool) -> InferenceEngine:
    engine = InferenceEngine(seed=3, sampler_process=sampler_process)
    engine.publish(policy)
    engines.append(engine)
    return engine


def wait_until(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def children() -> list[psutil.Process]:
    return psutil.Process().children()


def sample_then_publish_then_sample(engine: InferenceEngine, tokenizer: Any) -> tuple[Any, Any]:
    """A batch, then all-zero weights published (uniform logits: nothing like the base model's), then a batch."""
    assert engine.policy is not None
    zeroed = {key: torch.zeros_like(value) for key, value in engine.policy.model.state_dict().items()}
    first = asyncio.run(engine.sample(rows(tokenizer)))
    engine.publish_weights(zeroed, 1)
    return first, asyncio.run(engine.sample(rows(tokenizer)))


def logprobs(sampled: Any) -> list[float]:
    return [logprob for result in sampled[0] for logprob in result.logprobs]


def test_the_child_samples_what_the_thread_samples_and_from_the_weights_published_last(
    base: tuple[Any, Any], engines: list[InferenceEngine]
) -> None:
    tokenizer = base[1]
    before = set(children())
    thread_first, thread_second = sample_then_publish_then_sample(
        engine_with(engines, fresh_policy(base), sampler_process=False), tokenizer
    )
    child_first, child_second = sample_then_publish_then_sample(
        engine_with(engines, fresh_policy(base), sampler_process=True), tokenizer
    )

    assert len(set(children()) - before) == 1  # the second engine's sampler, forked once
    assert [r.token_ids for r in child_first[0]] == [r.token_ids for r in thread_first[0]]
    assert logprobs(child_first) == pytest.approx(logprobs(thread_first))
    assert child_second[1] == thread_second[1] == 1
    assert [r.token_ids for r in child_second[0]] == [r.token_ids for r in thread_second[0]]
    assert logprobs(child_second) == pytest.approx(logprobs(thread_second))
    assert logprobs(child_second) != pytest.approx(logprobs(child_first))


def test_a_child_that_dies_is_one_warning_and_sampling_goes_on_in_the_thread(
    base: tuple[Any, Any], engines: list[InferenceEngine], caplog: pytest.LogCaptureFixture
) -> None:
    engine = engine_with(engines, fresh_policy(base), sampler_process=True)
    before = set(children())
    asyncio.run(engine.sample(rows(base[1])))
    (child,) = set(children()) - before
    os.kill(child.pid, signal.SIGKILL)
    wait_until(lambda: child.status() == psutil.STATUS_ZOMBIE)  # dead, and left for the engine to reap

    with caplog.at_level(logging.WARNING, logger="hermes_nb.inference.engine"):
        results, _ = asyncio.run(engine.sample(rows(base[1])))

    assert len(results) == 17 and all(r.token_ids for r in results)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"pid {child.pid}" in warnings[0] and "SIGKILL" in warnings[0]
    asyncio.run(engine.sample(rows(base[1])))
    assert set(children()) - before == set()  # no new child: the thread samples from now on


def test_a_failing_batch_raises_for_its_requests_and_the_child_serves_the_next(
    base: tuple[Any, Any], engines: list[InferenceEngine]
) -> None:
    engine = engine_with(engines, fresh_policy(base), sampler_process=True)
    vocabulary = len(base[1])
    bad = [SampleRow(prompt=[vocabulary + 1000], max_tokens=2)]

    with pytest.raises(RuntimeError, match="sampling failed in the sampler process: IndexError"):
        asyncio.run(engine.sample(bad))
    results, _ = asyncio.run(engine.sample(rows(base[1])))
    assert len(results) == 17


def test_close_ends_the_child(base: tuple[Any, Any]) -> None:
    engine = InferenceEngine(seed=3, sampler_process=True)
    engine.publish(fresh_policy(base))
    before = set(children())
    asyncio.run(engine.sample(rows(base[1])))
    (child,) = set(children()) - before

    engine.close()

    child.wait(10)  # raises psutil.TimeoutExpired when it outlives the close
    assert not child.is_running()


def test_the_child_holds_none_of_the_parents_pipes_or_sockets(
    base: tuple[Any, Any], engines: list[InferenceEngine]
) -> None:
    read_end, write_end = os.pipe()  # like the trainer's pipe to its W&B mirror, open when the child forks
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    engine = engine_with(engines, fresh_policy(base), sampler_process=True)
    before = set(children())
    asyncio.run(engine.sample(rows(base[1])))
    assert len(set(children()) - before) == 1

    os.close(write_end)
    listener.close()

    readable, _, _ = select.select([read_end], [], [], 5.0)
    assert readable and os.read(read_end, 1) == b""  # end-of-file: no copy of the write end is left
    os.close(read_end)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5.0)
