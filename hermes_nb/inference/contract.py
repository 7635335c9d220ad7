"""What a run's inference server needs of a sampling engine, and the policy record an engine serves.

An engine holds the live policy and samples from it. The trainer ``publish``es the first policy (model, tokenizer,
version), then ``publish_weights`` after every optimizer step, may ``sleep`` the engine while a step needs the
accelerator (the next ``publish_weights`` wakes it), and ``close``s it last. The server
(``hermes_nb.inference.server``) reads ``policy`` and awaits ``sample``; every answer carries the
``policy_version`` that produced it.

Implementations, picked per run by ``hermes_nb.backends.make_engine``: ``InferenceEngine`` (batched torch sampling,
``engine.py``), ``VLLMEngine`` (vLLM in the trainer's process, ``vllm_engine.py``), ``TinkerEngine`` (Tinker's
sampler, ``hermes_nb.tinker.engine``). ``tests/unit/test_sampling_engine.py`` serves a run's server with one written
in the test.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from hermes_nb.inference.sampler import RowResult, SampleRow

# What one publication of new weights is, as the run's training backend makes it
# (``TrainingBackend.save_weights_for_sampler``): a state dict for the local engines, a sampler for Tinker's.
WeightsT = TypeVar("WeightsT")


@dataclass(frozen=True)
class Policy:
    """A frozen model snapshot with its tokenizer and the number of optimizer steps it has seen. ``model`` is what
    generates (a torch module, or what stands for one: ``config.max_position_embeddings`` is read of it)."""

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


class SamplingEngine(ABC, Generic[WeightsT]):
    """Holds the live policy; ``await engine.sample(rows)`` from the server's event loop.

    A subclass says how new weights are taken (``_take_weights``) and how rows are sampled (``sample``); holding
    the policy, refusing weights before a policy and the counters are here."""

    def __init__(self) -> None:
        self._policy: Policy | None = None
        # The trainer's thread publishes while the server's loop (and a sampler thread) read the policy.
        self._policy_lock = threading.Lock()
        self.batches_run = 0
        self.rows_run = 0

    @property
    def policy(self) -> Policy | None:
        """The policy new requests sample from; None until the first ``publish`` (``/health`` answers 503)."""
        return self._policy

    def publish(self, policy: Policy) -> None:
        """Make ``policy`` the one new requests sample from (a whole model, its tokenizer and version)."""
        with self._policy_lock:
            self._policy = policy

    def publish_weights(self, weights: WeightsT, version: int) -> None:
        """New weights for the current policy, sampled from by requests from the next batch on. The caller hands
        ``weights`` over: it must not modify them afterwards."""
        with self._policy_lock:
            if self._policy is None:
                raise RuntimeError("publish a policy before publishing weights for it")
            self._take_weights(self._policy, weights, version)

    @abstractmethod
    def _take_weights(self, policy: Policy, weights: WeightsT, version: int) -> None:
        """Keep ``weights`` as ``version`` of ``policy``'s model (called holding the policy lock)."""

    def _sampling_policy(self) -> Policy:
        """The policy a request arriving now samples from; refused before the first ``publish``."""
        policy = self._policy
        if policy is None:
            raise RuntimeError("no policy loaded yet")
        return policy

    def _count(self, rows: int) -> None:
        self.batches_run += 1
        self.rows_run += rows

    @abstractmethod
    async def sample(self, rows: list[SampleRow]) -> tuple[list[RowResult], int]:
        """Sample ``rows``; returns one result per row and the policy version that produced them."""

    def sleep(self) -> None:
        """Free the accelerator memory sampling holds until the next ``publish_weights`` (the loop's
        ``pause_sampling`` hook); requests meanwhile wait. An engine with nothing to free does nothing."""

    def close(self) -> None:
        """Release what the engine started (threads, processes); an engine that started nothing does nothing."""
