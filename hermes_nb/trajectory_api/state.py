"""The trajectory API's state: registrations, the queue of scored groups, buffering and batching.

Plain synchronous code with no web framework. The server calls these methods from its event loop and no
method awaits, so each request's change is applied whole before the next request is looked at: no lock is
needed, and a request that is refused changes nothing (every check runs before the first mutation).

Semantics follow ``atroposlib.api.server``; the deliberate differences are listed in this package's
``__init__``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from hermes_nb.errors import HermesNBError
from hermes_nb.protocol.trajectory import (
    TEST_ONLY_OVERRIDE,
    DisconnectEnvResponse,
    EnvStatusResponse,
    HealthResponse,
    InfoResponse,
    RegisterEnv,
    RegisterEnvResponse,
    Registration,
    ScoredDataGroup,
    ScoredDataListResponse,
    ScoredDataResponse,
    StatusResponse,
    WandbInfo,
    malformed_reason,
)
from hermes_nb.trajectory_api import batching

log = logging.getLogger("hermes_nb.trajectory_api")

MIB = 1024 * 1024
# atroposlib's floor on an environment's share of inference, so that no environment is starved completely.
MIN_ENV_WEIGHT = 0.01
WAIT_FOR_TRAINER = "wait for trainer to start"
# What a refusal for a full queue asks the sender to wait before trying again: about one trainer step on the
# shipped model, so a queue that the trainer drains again is refilled promptly, without busy-polling.
RETRY_AFTER_S = 1


class ApiLimits(BaseModel):
    """What one client may send. Defaults are far above a sane run and far below what hurts the server."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # A batch of 1024 sequences x 8k tokens with masks and logprobs is ~60 MiB of JSON.
    max_body_bytes: int = Field(default=64 * MIB, gt=0)
    # GRPO groups are 4-64 completions; thousands means a client bug, not a task.
    max_group_size: int = Field(default=1024, gt=0)
    # Per environment: odd-size groups waiting to combine. A stream of sizes that never sum to the group size
    # would otherwise grow without bound (and the subset search with it).
    max_buffered_groups: int = Field(default=256, gt=0)
    # Queued + buffered tokens. At ~100 bytes of Python objects per token (id, mask, logprob) this caps the
    # queue near 1.6 GB; a trainer that far behind is stuck, and the environment should back off.
    max_queued_tokens: int = Field(default=16_000_000, gt=0)
    # Queued + buffered sequences: the cap a run sets from ``trainer.max_queued_batches`` (environments are told
    # the room left in ``/status-env`` and wait). None: only the token limit above, as a standalone API.
    max_queued_sequences: int | None = Field(default=None, gt=0)


class RequestRejected(HermesNBError):
    """A request the API refuses with an HTTP 4xx/5xx; the message names the field. Nothing was changed."""

    def __init__(self, status_code: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retry_after = retry_after  # seconds, sent as ``Retry-After``: the request is fine, only early


@dataclass
class EnvRecord:
    env_id: int
    desired_name: str
    real_name: str
    max_token_length: int
    weight: float
    group_size: int
    min_batch_allocation: float | None
    connected: bool = True
    registered_at: float = field(default_factory=time.time)


@dataclass
class QueuedUnit:
    """Whole groups that enter a batch together: one group, or buffered groups summing to a group size."""

    groups: list[ScoredDataGroup]
    env_id: int | None

    @property
    def size(self) -> int:
        return sum(g.group_size for g in self.groups)


def _token_count(group: ScoredDataGroup) -> int:
    return sum(len(seq) for seq in group.tokens)


class TrajectoryState:
    def __init__(self, limits: ApiLimits | None = None) -> None:
        self.limits = limits or ApiLimits()
        self.reset()

    def reset(self) -> None:
        """Forget everything: registrations, environments, queue, buffers, step (``/reset_data``)."""
        self.registration: Registration | None = None
        self.requesters: list[int] = []
        self.envs: list[EnvRecord] = []
        self.queue: list[QueuedUnit] = []
        self.buffers: dict[int, list[ScoredDataGroup]] = {}
        self.latest: ScoredDataGroup | None = None
        self.current_step = 0
        self.stored_tokens = 0  # queued + buffered, against ``limits.max_queued_tokens``
        self.held_sequences = 0  # queued + buffered, against ``limits.max_queued_sequences``

    # ---- registration ------------------------------------------------------------------------------------
    def register(self, registration: Registration) -> int:
        """The trainer registers. The first registration sets the run's shape; later ones (more trainer
        ranks, a restarted trainer) only get an id, as in atroposlib. Returns that id."""
        if self.registration is None:
            self.registration = registration
            self.current_step = registration.starting_step
            log.info(
                "trainer registered: batch_size=%d max_token_len=%d num_steps=%d starting_step=%d",
                registration.batch_size,
                registration.max_token_len,
                registration.num_steps,
                registration.starting_step,
            )
        elif registration != self.registration:
            log.warning("a second /register with other settings was ignored; the first registration stands")
        requester = uuid.uuid4().int
        self.requesters.append(requester)
        return requester

    def register_env(self, request: RegisterEnv) -> RegisterEnvResponse:
        if self.registration is None:
            return RegisterEnvResponse(status=WAIT_FOR_TRAINER)
        self._check_env_group_size(request.group_size, self.registration.batch_size)
        same_name = sum(1 for env in self.envs if env.desired_name == request.desired_name)
        record = EnvRecord(
            env_id=len(self.envs),
            desired_name=request.desired_name,
            real_name=f"{request.desired_name}_{same_name}",
            max_token_length=request.max_token_length,
            weight=request.weight,
            group_size=request.group_size,
            min_batch_allocation=request.min_batch_allocation,
        )
        self.envs.append(record)
        log.info("environment %d registered as %s (group_size=%d)", record.env_id, record.real_name, record.group_size)
        return RegisterEnvResponse(
            status="success",
            env_id=record.env_id,
            wandb_name=record.real_name,
            checkpoint_dir=self.registration.checkpoint_dir,
            starting_step=self.current_step,
            checkpoint_interval=self.registration.save_checkpoint_interval,
            num_steps=self.registration.num_steps,
        )

    def _check_env_group_size(self, group_size: int, batch_size: int) -> None:
        if group_size > self.limits.max_group_size:
            raise RequestRejected(
                422, f"group_size: {group_size} is above this API's limit of {self.limits.max_group_size}"
            )
        if group_size > batch_size:
            raise RequestRejected(
                422,
                f"group_size: {group_size} is larger than the trainer's batch_size {batch_size}; "
                "a batch is made of whole groups",
            )

    def disconnect_env(self, env_id: int) -> DisconnectEnvResponse:
        env = self._env(env_id)
        if env is None:
            return DisconnectEnvResponse(status="failure", error=self._unknown_env(env_id))
        env.connected = False
        log.info("environment %d (%s) disconnected", env.env_id, env.real_name)
        return DisconnectEnvResponse(status="success")

    def _env(self, env_id: int | None) -> EnvRecord | None:
        if env_id is None or not 0 <= env_id < len(self.envs):
            return None
        return self.envs[env_id]

    def _unknown_env(self, env_id: int) -> str:
        known = f"0..{len(self.envs) - 1}" if self.envs else "none yet"
        return f"env_id: no environment {env_id} is registered (registered ids: {known})"

    # ---- reading -----------------------------------------------------------------------------------------
    def info(self) -> InfoResponse:
        if self.registration is None:
            return InfoResponse(batch_size=-1, max_token_len=-1)
        registration = self.registration
        return InfoResponse(
            batch_size=registration.batch_size,
            max_token_len=registration.max_token_len,
            vocab_size=registration.vocab_size,
        )

    def wandb_info(self) -> WandbInfo:
        if self.registration is None:
            return WandbInfo()
        return WandbInfo(group=self.registration.wandb_group, project=self.registration.wandb_project)

    def status(self) -> StatusResponse:
        """``queue_size`` counts queued units (groups), not sequences, as atroposlib's ``len(queue)``."""
        return StatusResponse(current_step=self.current_step, queue_size=len(self.queue))

    def health(self) -> HealthResponse:
        return HealthResponse(
            status="ok",
            trainer_registered=self.registration is not None,
            num_envs=sum(1 for env in self.envs if env.connected),
            current_step=self.current_step,
            queue_size=len(self.queue),
            held_sequences=self.held_sequences,
            max_queued_sequences=self.limits.max_queued_sequences,
        )

    def queue_room(self) -> int | None:
        """Sequences that may still be posted before the cap refuses them; ``None`` without a cap."""
        cap = self.limits.max_queued_sequences
        return None if cap is None else max(0, cap - self.held_sequences)

    def status_env(self, env_id: int) -> EnvStatusResponse:
        """An environment's view for back-pressure, with atroposlib's arithmetic (``/status-env``)."""
        env = self._env(env_id)
        if env is None:
            raise RequestRejected(404, self._unknown_env(env_id))
        largest = max((unit.size for unit in self.queue), default=1)
        own_sequences = sum(unit.size for unit in self.queue if unit.env_id == env_id)
        # Its own units may be larger than registered when groups arrived without a registered env; atroposlib
        # then divides by the larger size.
        group_size = max([env.group_size, *(unit.size for unit in self.queue if unit.env_id == env_id)])
        queue_sequences = own_sequences + self._available_from_others(env_id, largest)
        return EnvStatusResponse(
            current_step=self.current_step,
            queue_size=queue_sequences // group_size,
            unallocated_fraction=1.0 - min(self._total_min_allocation(), 1.0),
            self_queue_size=own_sequences // group_size,
            max_group_size=largest,
            env_weight=self._env_weight(env),
            queue_room=self.queue_room(),
        )

    def _env_weight(self, env: EnvRecord) -> float:
        # Share of inference: context length x weight over all connected environments (atroposlib).
        total = sum(e.max_token_length * max(0.0, e.weight) for e in self.envs if e.connected)
        if total <= 0:
            return 1.0  # no environment claims a share, so none competes; atroposlib divides by zero here
        return max(MIN_ENV_WEIGHT, env.max_token_length * env.weight / total)

    def _total_min_allocation(self) -> float:
        return sum(e.min_batch_allocation or 0.0 for e in self.envs if e.connected)

    def _available_from_others(self, env_id: int, largest: int) -> int:
        """Sequences of other environments that could fill this env's batches: their queued sequences
        rounded up to whole packs, less what their own minimum allocations reserve."""
        if largest <= 1:
            return 0  # atroposlib counts other environments only when some unit is larger than one
        by_env: dict[int | None, int] = {}
        for unit in self.queue:
            if unit.env_id != env_id:
                by_env[unit.env_id] = by_env.get(unit.env_id, 0) + unit.size
        batch_size = self.registration.batch_size if self.registration else 0
        available = 0
        for other, sequences in by_env.items():
            packs = -(-sequences // largest)  # ceil
            env = self._env(other)
            reserved = 0
            if env is not None and env.connected and env.min_batch_allocation is not None:
                reserved = int(batch_size * env.min_batch_allocation)
            available += max(0, packs * largest - reserved)
        return available

    def latest_example(self) -> ScoredDataGroup | None:
        return self.latest

    # ---- scored data -------------------------------------------------------------------------------------
    def add_group(self, group: ScoredDataGroup) -> ScoredDataResponse:
        """Queue one scored group (``/scored_data``), or buffer it when its size differs from its env's."""
        self._check_groups([group], where="")
        return self._accept(group)

    def add_groups(self, groups: Sequence[ScoredDataGroup]) -> ScoredDataListResponse:
        """All of ``groups`` or none of them (``/scored_data_list``)."""
        self._check_groups(groups, where="scored_data_list")
        buffered = 0
        last_buffer_size: int | None = None
        for group in groups:
            result = self._accept(group)
            if result.status == "buffered":
                buffered += 1
                last_buffer_size = result.buffer_size
        return ScoredDataListResponse(
            status="received",
            groups_processed=len(groups),
            buffered=buffered or None,
            last_buffer_size=last_buffer_size,
        )

    def _check_groups(self, groups: Sequence[ScoredDataGroup], where: str) -> None:
        incoming_tokens = incoming_sequences = 0
        to_buffer: dict[int, int] = {}
        for index, group in enumerate(groups):
            prefix = f"{where}[{index}]." if where else ""
            self._check_group(group, prefix)
            incoming_tokens += _token_count(group)
            incoming_sequences += group.group_size
            env = self._env(group.env_id)
            if env is not None and group.group_size != env.group_size:
                to_buffer[env.env_id] = to_buffer.get(env.env_id, 0) + 1
        for env_id, count in to_buffer.items():
            self._check_buffer_room(env_id, count)
        self._check_sequence_cap(incoming_sequences, where)
        if self.stored_tokens + incoming_tokens > self.limits.max_queued_tokens:
            raise RequestRejected(
                503,
                f"tokens: the queue holds {self.stored_tokens} tokens and this request adds {incoming_tokens}, "
                f"over the limit of {self.limits.max_queued_tokens}; the trainer is not pulling batches, "
                "retry later",
                retry_after=RETRY_AFTER_S,
            )

    def _check_sequence_cap(self, incoming: int, where: str) -> None:
        """503 + Retry-After while the queue is full: the sender keeps its groups and posts them again later
        (atroposlib environments retry a 5xx). A request that could never fit is a 413, which our environments
        answer by posting its groups one by one."""
        cap = self.limits.max_queued_sequences
        if cap is None or self.held_sequences + incoming <= cap:
            return
        field = where or "tokens"
        if incoming > cap:
            raise RequestRejected(
                413, f"{field}: {incoming} sequences in one request, more than the queue's cap of {cap}; send fewer"
            )
        raise RequestRejected(
            503,
            f"{field}: the queue is full ({self.held_sequences} of {cap} sequences held, this request adds "
            f"{incoming}); the trainer is not pulling batches, retry later",
            retry_after=RETRY_AFTER_S,
        )

    def _check_buffer_room(self, env_id: int, incoming: int) -> None:
        waiting = len(self.buffers.get(env_id, []))
        if waiting + incoming <= self.limits.max_buffered_groups:
            return
        group_size = self.envs[env_id].group_size
        raise RequestRejected(
            409,
            f"tokens: environment {env_id} already has {waiting} groups of another size than its group_size "
            f"{group_size} waiting to combine (limit {self.limits.max_buffered_groups}); "
            f"post groups of {group_size} sequences",
        )

    def _check_group(self, group: ScoredDataGroup, prefix: str) -> None:
        if group.is_test_only():
            raise RequestRejected(
                422,
                f"{prefix}group_overrides.{TEST_ONLY_OVERRIDE}: this group's token ids were re-made from an "
                "endpoint's text (rl_test_inference); it is never trained on",
            )
        if group.group_size > self.limits.max_group_size:
            raise RequestRejected(
                422,
                f"{prefix}tokens: {group.group_size} sequences in one group, above this API's limit of "
                f"{self.limits.max_group_size}",
            )
        max_len = self.registration.max_token_len if self.registration else None
        vocab_size = self.registration.vocab_size if self.registration else None
        if (problem := malformed_reason(group, vocab_size)) is not None:
            raise RequestRejected(422, f"{prefix}{problem}")
        overlong = group.overlong_sequence(max_len) if max_len is not None else None
        if overlong is not None:
            index, length = overlong
            raise RequestRejected(
                422, f"{prefix}tokens[{index}]: {length} tokens, longer than the trainer's max_token_len {max_len}"
            )
        env = self._env(group.env_id)
        if env is not None and group.group_size > env.group_size:
            raise RequestRejected(
                422,
                f"{prefix}tokens: {group.group_size} sequences, more than environment {env.env_id}'s registered "
                f"group_size {env.group_size}; a larger group can never be combined into a group of that size",
            )

    def _accept(self, group: ScoredDataGroup) -> ScoredDataResponse:
        self.stored_tokens += _token_count(group)
        self.held_sequences += group.group_size
        env = self._env(group.env_id)
        if env is None or group.group_size == env.group_size:
            self.queue.append(QueuedUnit(groups=[group], env_id=group.env_id))
            self.latest = group
            return ScoredDataResponse(status="received")
        buffer = self.buffers.setdefault(env.env_id, [])
        buffer.append(group)
        combined = batching.subset_summing_to([g.group_size for g in buffer], env.group_size)
        if combined:
            groups = [buffer[i] for i in combined]
            leaving = set(combined)
            self.buffers[env.env_id] = [g for i, g in enumerate(buffer) if i not in leaving]
            self.queue.append(QueuedUnit(groups=groups, env_id=env.env_id))
            self.latest = groups[-1]
        waiting = sum(g.group_size for g in self.buffers[env.env_id])
        return ScoredDataResponse(status="buffered", buffer_size=waiting)

    # ---- batches -----------------------------------------------------------------------------------------
    def next_batch(self) -> list[ScoredDataGroup] | None:
        """Exactly ``batch_size`` sequences of whole groups, oldest first, or ``None`` when too few are queued.

        Serving a batch is one trainer step: ``current_step`` goes up by one.
        """
        if self.registration is None:
            return None
        chosen = self._select(self.registration.batch_size)
        if chosen is None:
            return None
        picked = set(chosen)
        units = [self.queue[i] for i in chosen]
        self.queue = [unit for i, unit in enumerate(self.queue) if i not in picked]
        batch = [group for unit in units for group in unit.groups]
        self.stored_tokens -= sum(_token_count(g) for g in batch)
        self.held_sequences -= sum(g.group_size for g in batch)
        self.current_step += 1
        log.info(
            "step %d: served %d groups (%d sequences); %d units queued",
            self.current_step,
            len(batch),
            sum(g.group_size for g in batch),
            len(self.queue),
        )
        return batch

    def _select(self, batch_size: int) -> list[int] | None:
        sizes = [unit.size for unit in self.queue]
        # A disconnected environment's minimum no longer holds batches back (atroposlib).
        minimums: dict[int, float] = {}
        for env in self.envs:
            if env.connected and env.min_batch_allocation is not None:
                minimums[env.env_id] = env.min_batch_allocation
        if not minimums:
            return batching.select_exact(sizes, batch_size)
        env_ids = [unit.env_id for unit in self.queue]
        return batching.select_with_minimums(sizes, env_ids, batch_size, minimums)
