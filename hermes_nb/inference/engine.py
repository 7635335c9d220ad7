"""The live policy and the request batcher between the HTTP handlers and the sampler.

Requests that arrive while the sampler is busy, or within ``window_s`` of each other, are merged into one
batched generation: that is where a CPU server gets its throughput, since the environment sends up to
``max_num_workers`` group requests at once. Generation runs on one worker thread, so the server's event loop
keeps answering (``/health``) during a batch.

The engine runs the policy's model where it is (``trainer.device``, in its dtype: ``hermes_nb.system.devices``);
published weights are copied into that model, so they may come in any dtype or device.

Weight updates: ``publish`` installs a whole policy (model, tokenizer, version); ``publish_weights`` hands over
only new weights for it (a state dict the publisher no longer touches), which the sampler thread copies into
its model *between* batches. Only that thread ever runs or changes the model, so a generation never sees a
half-applied update, and every response reports the ``policy_version`` that produced it. A trainer publishing
after every step thus pays a tensor copy, not a deep copy of the module.

``sampler_process=True`` (the trainer's engine) runs each batch in a forked child instead of on the sampler
thread itself (``hermes_nb.inference.sampler_process``: CPU models only), so that sampling and the training
thread beside it do not take turns on this process's GIL; the sampler thread then only loads weights and waits.
A child that dies is one warning, and sampling goes on in the thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
from dataclasses import dataclass
from typing import Any

import torch

from hermes_nb.inference.contract import Policy, SamplingEngine
from hermes_nb.inference.sampler import RowResult, SampleRow, device_generator, generate, model_device
from hermes_nb.inference.sampler_process import SamplerProcess, SamplerProcessExited, can_fork

logger = logging.getLogger(__name__)

# Requests arriving this close together share a batch. A group request costs ~100 ms on CPU, so waiting
# a few ms to merge the other workers' requests costs little and multiplies throughput.
DEFAULT_BATCH_WINDOW_S = 0.004
# Rows per batched generation: bounds the KV cache and keeps one huge burst from delaying everything.
MAX_BATCH_ROWS = 1024


@dataclass
class _Pending:
    rows: list[SampleRow]
    future: asyncio.Future[tuple[list[RowResult], int]]


class InferenceEngine(SamplingEngine[dict[str, torch.Tensor]]):
    """Holds the live policy; ``await engine.sample(rows)`` from the server's event loop."""

    def __init__(
        self, *, window_s: float = DEFAULT_BATCH_WINDOW_S, seed: int = 0, sampler_process: bool = False
    ) -> None:
        super().__init__()
        self._sampler_process_wanted = sampler_process
        self._sampler_process: SamplerProcess | None = None
        self._pending_weights: tuple[dict[str, torch.Tensor], int] | None = None
        self._pending: list[_Pending] = []
        self._collector: asyncio.Task[None] | None = None
        self._window_s = window_s
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sampler")
        self._seed = seed
        # One seeded noise stream per device a policy has lived on (torch draws only from a same-device generator).
        self._generators: dict[torch.device, torch.Generator] = {}
        self._generator_lock = threading.Lock()

    def publish(self, policy: Policy) -> None:
        """Make ``policy`` the one new batches sample from (thread-safe: one reference assignment)."""
        with self._policy_lock:
            self._pending_weights = None  # weights published before belong to the model being replaced
            self._policy = policy

    def _take_weights(self, policy: Policy, weights: dict[str, torch.Tensor], version: int) -> None:
        """Held until the sampler thread loads them into the model, between batches (``_current_policy``)."""
        self._pending_weights = (weights, version)

    def _current_policy(self) -> Policy:
        """The policy to generate with, with any pending weights applied (sampler thread only)."""
        with self._policy_lock:
            pending, self._pending_weights = self._pending_weights, None
            policy = self._policy
        assert policy is not None  # sample() refuses before the first publish
        if pending is None:
            return policy
        weights, version = pending
        self._load_weights(policy, weights)
        policy = dataclasses.replace(policy, version=version)
        with self._policy_lock:
            if self._policy is not None and self._policy.model is policy.model:
                self._policy = policy
        return policy

    def _load_weights(self, policy: Policy, weights: dict[str, torch.Tensor]) -> None:
        """Copy ``weights`` into what generates (sampler thread only, between batches): here the policy's model."""
        policy.model.load_state_dict(weights)

    async def sample(self, rows: list[SampleRow]) -> tuple[list[RowResult], int]:
        """Generate ``rows`` (merged with concurrent requests); returns results and the policy version."""
        self._sampling_policy()  # refused before the first publish
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
        rows = [row for item in batch for row in item.rows]
        loop = asyncio.get_running_loop()
        try:
            results, version = await loop.run_in_executor(self._executor, self._generate, rows)
        except Exception as exc:
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(exc)
            return
        self._count(len(rows))
        start = 0
        for item in batch:
            if not item.future.done():
                item.future.set_result((results[start : start + len(item.rows)], version))
            start += len(item.rows)

    def _generator_for(self, model: Any) -> torch.Generator:
        device = model_device(model)
        if device not in self._generators:
            self._generators[device] = device_generator(device, self._seed)
        return self._generators[device]

    def _generate(self, rows: list[SampleRow]) -> tuple[list[RowResult], int]:
        with self._generator_lock:
            policy = self._current_policy()
            child = self._child_for(policy)
            if child is not None:
                try:
                    return child.generate(rows), policy.version
                except SamplerProcessExited as exc:
                    logger.warning("%s; sampling goes on in the trainer process", exc)
                    self._sampler_process_wanted = False
                    self._close_child()
            generator = self._generator_for(policy.model)
            results = generate(policy.model, rows, pad_id=policy.pad_id, decode=policy.decode, generator=generator)
            return results, policy.version

    def _child_for(self, policy: Policy) -> SamplerProcess | None:
        """The forked sampler of ``policy``'s model, started on first use (sampler thread only); None: sample here."""
        if not self._sampler_process_wanted or not can_fork(policy.model):
            return None
        if self._sampler_process is not None and self._sampler_process.model is not policy.model:
            self._close_child()  # a new model was published: the old child samples a model nobody serves
        if self._sampler_process is None:
            self._sampler_process = SamplerProcess(
                policy.model, pad_id=policy.pad_id, decode=policy.decode, seed=self._seed
            )
        return self._sampler_process

    def _close_child(self) -> None:
        child, self._sampler_process = self._sampler_process, None
        if child is not None:
            child.close()

    def close(self) -> None:
        # The child is closed on the sampler thread, after any batch still running there: that thread owns the pipe.
        with contextlib.suppress(RuntimeError):  # closed before
            self._executor.submit(self._close_child)
        self._executor.shutdown(wait=False)
