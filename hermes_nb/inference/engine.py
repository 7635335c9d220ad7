"""The live policy and the request batcher between the HTTP handlers and the sampler.

Requests that arrive while the sampler is busy, or within ``window_s`` of each other, are merged into one
batched generation: that is where a CPU server gets its throughput, since the environment sends up to
``max_num_workers`` group requests at once. Generation runs on one worker thread, so the server's event loop
keeps answering (``/health``) during a batch.

Weight updates: a published policy is an immutable snapshot (``Policy``). A batch reads the current snapshot
once, at its start, and uses it to the end; publishing replaces the reference. So a generation never sees a
half-applied update, and every response reports the ``policy_version`` that produced it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from dataclasses import dataclass
from typing import Any

import torch

from hermes_nb.inference.sampler import RowResult, SampleRow, generate

# Requests arriving this close together share a batch. A group request costs ~100 ms on CPU, so waiting
# a few ms to merge the other workers' requests costs little and multiplies throughput.
DEFAULT_BATCH_WINDOW_S = 0.004
# Rows per batched generation: bounds the KV cache and keeps one huge burst from delaying everything.
MAX_BATCH_ROWS = 1024


@dataclass(frozen=True)
class Policy:
    """A frozen model snapshot with its tokenizer and the number of optimizer steps it has seen."""

    model: Any
    tokenizer: Any
    version: int
    name: str

    @property
    def pad_id(self) -> int:
        tok = self.tokenizer
        return int(tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0))

    @property
    def eos_ids(self) -> frozenset[int]:
        eos = self.tokenizer.eos_token_id
        return frozenset() if eos is None else frozenset([int(eos)])

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))


@dataclass
class _Pending:
    rows: list[SampleRow]
    future: asyncio.Future[tuple[list[RowResult], int]]


class InferenceEngine:
    """Holds the live policy; ``await engine.sample(rows)`` from the server's event loop."""

    def __init__(self, *, window_s: float = DEFAULT_BATCH_WINDOW_S, seed: int = 0) -> None:
        self._policy: Policy | None = None
        self._pending: list[_Pending] = []
        self._collector: asyncio.Task[None] | None = None
        self._window_s = window_s
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sampler")
        self._generator = torch.Generator().manual_seed(seed)
        self._generator_lock = threading.Lock()
        self.batches_run = 0
        self.rows_run = 0

    @property
    def policy(self) -> Policy | None:
        return self._policy

    def publish(self, policy: Policy) -> None:
        """Make ``policy`` the one new batches sample from (thread-safe: one reference assignment)."""
        self._policy = policy

    async def sample(self, rows: list[SampleRow]) -> tuple[list[RowResult], int]:
        """Generate ``rows`` (merged with concurrent requests); returns results and the policy version."""
        if self._policy is None:
            raise RuntimeError("no policy loaded yet")
        future: asyncio.Future[tuple[list[RowResult], int]] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(rows, future))
        if self._collector is None:
            self._collector = asyncio.get_running_loop().create_task(self._collect())
        return await future

    def _take_batch(self) -> list[_Pending]:
        taken: list[_Pending] = []
        size = 0
        while self._pending and (not taken or size + len(self._pending[0].rows) <= MAX_BATCH_ROWS):
            item = self._pending.pop(0)
            taken.append(item)
            size += len(item.rows)
        return taken

    async def _collect(self) -> None:
        try:
            await asyncio.sleep(self._window_s)
            while self._pending:
                await self._run(self._take_batch())
        finally:
            self._collector = None

    async def _run(self, batch: list[_Pending]) -> None:
        policy = self._policy
        assert policy is not None  # sample() refuses before the first publish
        rows = [row for item in batch for row in item.rows]
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(self._executor, self._generate, policy, rows)
        except Exception as exc:
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(exc)
            return
        self.batches_run += 1
        self.rows_run += len(rows)
        start = 0
        for item in batch:
            if not item.future.done():
                item.future.set_result((results[start : start + len(item.rows)], policy.version))
            start += len(item.rows)

    def _generate(self, policy: Policy, rows: list[SampleRow]) -> list[RowResult]:
        with self._generator_lock:
            return generate(policy.model, rows, pad_id=policy.pad_id, decode=policy.decode, generator=self._generator)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
