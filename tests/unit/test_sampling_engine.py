"""A sampling engine written here, against the contract alone (``hermes_nb.inference.contract``), serves a run's
inference server: the real server on loopback, called through the environments' own client."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from hermes_nb.env.inference_client import ServerManager
from hermes_nb.env.server_config import APIServerConfig
from hermes_nb.inference.contract import Policy, SamplingEngine
from hermes_nb.inference.sampler import RowResult, SampleRow
from hermes_nb.inference.server import InferenceServer
from hermes_nb.protocol.inference import GenerateRequest
from hermes_nb.system.home import embedded_base_model_dir
from hermes_nb.system.net import free_port

# What the scripted engine answers with a logprob of, for every token: any value the test can recognise.
SCRIPTED_LOGPROB = -0.25


class ScriptedEngine(SamplingEngine[list[int]]):
    """Answers every row with its script (its "weights": a list of token ids), cut at the row's ``max_tokens``,
    and keeps the rows it was asked for."""

    def __init__(self, script: list[int]) -> None:
        super().__init__()
        self.script = script
        self.seen: list[SampleRow] = []

    def _take_weights(self, policy: Policy, weights: list[int], version: int) -> None:
        self.script = weights
        self._policy = dataclasses.replace(policy, version=version)

    async def sample(self, rows: list[SampleRow]) -> tuple[list[RowResult], int]:
        policy = self._sampling_policy()
        self.seen.extend(rows)
        self._count(len(rows))
        results = [self._answer(row) for row in rows]
        return results, policy.version

    def _answer(self, row: SampleRow) -> RowResult:
        tokens = self.script[: row.max_tokens]
        return RowResult(token_ids=tokens, logprobs=[SCRIPTED_LOGPROB] * len(tokens), finish_reason="length")


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(embedded_base_model_dir()))


def _policy(tokenizer: Any, version: int) -> Policy:
    # The server reads only the context length of a policy's model.
    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=256))
    return Policy(model=model, tokenizer=tokenizer, version=version, name="scripted")


def _script(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


@pytest.fixture
def served(tokenizer: Any) -> Iterator[tuple[ScriptedEngine, str]]:
    engine = ScriptedEngine(_script(tokenizer, "abcd"))
    server = InferenceServer(engine, free_port())
    server.start()
    yield engine, f"http://127.0.0.1:{server.port}"
    server.stop()


def _client(url: str) -> ServerManager:
    return ServerManager([APIServerConfig(base_url=f"{url}/v1", model_name="scripted")], coalesce=False)


def test_the_server_answers_503_until_the_test_engine_has_a_policy(served, tokenizer) -> None:  # type: ignore[no-untyped-def]
    engine, url = served
    assert httpx.get(f"{url}/health").status_code == 503
    engine.publish(_policy(tokenizer, version=4))
    assert httpx.get(f"{url}/health").json() == {"status": "ok", "model": "scripted", "policy_version": 4}


def test_completions_through_the_client_carry_the_test_engines_tokens(served, tokenizer) -> None:  # type: ignore[no-untyped-def]
    engine, url = served
    engine.publish(_policy(tokenizer, version=2))

    async def sample() -> Any:
        client = _client(url)
        try:
            return await client.sample("2+2=", n=2, max_tokens=3)
        finally:
            await client.aclose()

    completions = asyncio.run(sample())
    prompt = _script(tokenizer, "2+2=")
    assert [row.prompt for row in engine.seen] == [prompt, prompt]
    assert [row.max_tokens for row in engine.seen] == [3, 3]
    for completion in completions:
        assert completion.prompt_token_ids == prompt
        assert completion.token_ids == engine.script[:3]
        assert completion.logprobs == [SCRIPTED_LOGPROB] * 3


def test_generate_answers_with_the_version_of_the_weights_published_last(served, tokenizer) -> None:  # type: ignore[no-untyped-def]
    engine, url = served
    engine.publish(_policy(tokenizer, version=0))
    engine.publish_weights(_script(tokenizer, "xyz"), version=7)

    async def generate() -> Any:
        client = _client(url)
        try:
            return await client.generate(GenerateRequest(prompt_token_ids=[[5, 6, 7]], max_tokens=2, n=1))
        finally:
            await client.aclose()

    response = asyncio.run(generate())
    assert engine.seen[-1].prompt == [5, 6, 7]
    assert response.policy_version == 7
    assert response.sequences[0].token_ids == _script(tokenizer, "xyz")[:2]
    assert (engine.batches_run, engine.rows_run) == (1, 1)


def test_weights_before_a_policy_are_refused() -> None:
    with pytest.raises(RuntimeError, match="publish a policy before publishing weights"):
        ScriptedEngine([1]).publish_weights([2], version=1)
