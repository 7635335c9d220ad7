"""The inference engine of a run on the Tinker backend: the run's own OpenAI-compatible server
(``hermes_nb.inference.server``) answers from a Tinker sampling client instead of a local model, so environments
never change with the backend.

It is a ``SamplingEngine`` (``hermes_nb.inference.contract``) whose weights are samplers: ``Policy.model`` is a
``TinkerSampler`` (the SDK's sampling client for one set of published weights); the trainer publishes a new one after
every optimizer step, and a request samples all its rows from the sampler current when it arrived, whose version it
reports. Requests are not held back to be merged: each group goes to the server as one ``sample`` call with
``num_samples = n`` (the prompt is sent and prefilled once), and the SDK keeps many calls in flight at once, so the
server batches them itself while the trainer's own calls proceed.

Stop strings are applied here (Tinker's ``stop`` takes token ids or strings, not both): a row ends after the token
that completes a stop string, like the local sampler; tokens past it and their logprobs are dropped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hermes_nb.inference.contract import Policy, SamplingEngine
from hermes_nb.inference.sampler import RowResult, SampleRow


@dataclass
class SamplingStats:
    """Counters shared by the engine (which adds to them) and the trainer (which records them in ``tinker.json``)."""

    tokens_sampled: int = 0
    requests: int = 0
    failures: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, tokens: int, requests: int = 1) -> None:
        with self._lock:
            self.tokens_sampled += tokens
            self.requests += requests


@dataclass(frozen=True)
class TinkerSampler:
    """One published set of weights: the SDK's sampling client, plus what the server reads of a model
    (``config.max_position_embeddings`` when the base model's config is at hand)."""

    client: Any
    config: Any
    stats: SamplingStats
    path: str | None = None


def _params(tinker: Any, row: SampleRow) -> Any:
    return tinker.SamplingParams(
        max_tokens=row.max_tokens,
        temperature=row.temperature,
        top_p=row.top_p,
        seed=row.seed,
        stop=sorted(row.stop_token_ids) or None,
    )


def _groups(rows: list[SampleRow]) -> list[tuple[SampleRow, int]]:
    """Runs of identical unseeded rows (a prompt with ``n`` > 1) as ``(row, count)``: one request each."""
    groups: list[tuple[SampleRow, int]] = []
    for row in rows:
        if groups and row.seed is None and groups[-1][0] == row:
            groups[-1] = (row, groups[-1][1] + 1)
        else:
            groups.append((row, 1))
    return groups


def awaitable(future: Any) -> Any:
    """What ``sample`` returned, awaitable on this event loop: tinker 0.24 returns a ``concurrent.futures.Future``,
    0.38 an ``APIFuture`` that is awaitable itself."""
    if isinstance(future, concurrent.futures.Future):
        return asyncio.wrap_future(future)
    return future


def trim(row: SampleRow, tokens: list[int], logprobs: list[float], decode: Callable[[list[int]], str]) -> RowResult:
    """The row as the local sampler would end it: after a stop token, after the token completing a stop string,
    or at ``max_tokens``."""
    result = RowResult()
    for token, logprob in zip(tokens, logprobs, strict=False):
        result.token_ids.append(int(token))
        result.logprobs.append(float(logprob))
        if token in row.stop_token_ids or (
            row.stop_strings and any(s in decode(result.token_ids) for s in row.stop_strings)
        ):
            result.finish_reason = "stop"
            return result
        if len(result.token_ids) >= row.max_tokens:
            break
    result.finish_reason = "length"
    return result


class TinkerEngine(SamplingEngine[TinkerSampler]):
    """Holds the live Tinker policy; ``await engine.sample(rows)`` from the server's event loop. It has nothing to
    close: the SDK's clients belong to the backend."""

    def _take_weights(self, policy: Policy, weights: TinkerSampler, version: int) -> None:
        """The sampler of new weights, used by requests that arrive from now on."""
        self._policy = dataclasses.replace(policy, model=weights, version=version)

    async def sample(self, rows: list[SampleRow]) -> tuple[list[RowResult], int]:
        policy = self._sampling_policy()
        sampler: TinkerSampler = policy.model
        from hermes_nb.tinker.calls import import_tinker

        tinker = import_tinker()
        groups = _groups(rows)
        futures = [
            awaitable(
                sampler.client.sample(
                    prompt=tinker.ModelInput.from_ints(tokens=row.prompt),
                    num_samples=count,
                    sampling_params=_params(tinker, row),
                )
            )
            for row, count in groups
        ]
        try:
            responses = await asyncio.gather(*futures)
        except Exception:
            sampler.stats.failures += 1
            raise
        results = self._results(groups, responses, policy.decode)
        sampler.stats.add(sum(len(r.token_ids) for r in results), len(groups))
        self._count(len(rows))
        return results, policy.version

    @staticmethod
    def _results(
        groups: list[tuple[SampleRow, int]], responses: list[Any], decode: Callable[[list[int]], str]
    ) -> list[RowResult]:
        results: list[RowResult] = []
        for (row, count), response in zip(groups, responses, strict=True):
            sequences = list(response.sequences)
            if len(sequences) != count:
                raise RuntimeError(f"Tinker returned {len(sequences)} samples for a request of {count}")
            for sequence in sequences:
                logprobs = list(sequence.logprobs or [])
                if len(logprobs) != len(sequence.tokens):
                    raise RuntimeError("Tinker returned a sample without a logprob per token; training needs them")
                results.append(trim(row, list(sequence.tokens), logprobs, decode))
        return results


def checkpoint_policy(model_dir: Any, name: str) -> Policy | None:
    """A policy sampling a Tinker checkpoint's weights on its server (``rl_test_inference`` of a Tinker run's
    checkpoint); None when ``model_dir`` is a local model."""
    from transformers import AutoConfig, AutoTokenizer

    from hermes_nb.protocol.tinker import read_checkpoint
    from hermes_nb.tinker.calls import connect, resolved

    saved = read_checkpoint(model_dir)
    if saved is None or not saved.sampler_path:
        return None
    base_url = saved.base_url if saved.base_url.startswith(("http://", "https://")) else None
    client = resolved(connect(base_url).create_sampling_client(model_path=saved.sampler_path))
    sampler = TinkerSampler(
        client=client, config=AutoConfig.from_pretrained(str(model_dir)), stats=SamplingStats(), path=saved.sampler_path
    )
    return Policy(model=sampler, tokenizer=AutoTokenizer.from_pretrained(str(model_dir)), version=0, name=name)
