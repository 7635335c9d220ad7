"""Replay for transfer learning: an earlier run's recorded groups mixed into the first ``fine_tune_steps`` batches.

``trainer.transfer_weight`` of each batch's sequences comes from the replay, in whole groups, as close to that
fraction as whole groups allow; the API batch gives the rest, and its excess whole groups are dropped (not trained
on; the environment keeps producing fresh ones). Replay groups are drawn in a shuffled order seeded by the
trainer seed (and the step a resumed run starts at, so a resume does not replay the same order again), each once
per pass over the file.

Replayed groups train on-policy. They were sampled by another policy (the earlier run's, many updates ago), so
the importance ratio ``p_current / p_sampling`` against their recorded ``inference_logprobs`` can be far from 1:
it would blow the gradient up or, under ``ppo``, clip it to nothing. Dropping those logprobs makes the loop take
the sampling logprobs from the current policy (ratio 1 at the step), which turns the replayed groups into a plain
REINFORCE update on the earlier task's answers, weighted by how they scored: better than average is pushed up,
worse pushed down. Advantages are likewise recomputed from the stored scores (any per-token ``advantages`` sent
with a group are dropped) because the scores are the verifier's verdict, independent of the policy, while sent
advantages may be relative to a baseline of the old policy. Groups whose scores are all equal carry no signal
(zero advantage), so the pool keeps only groups with signal when there are any: otherwise the replayed share of a
batch, late in a run that solved its task, would mostly be no-ops.
"""

from __future__ import annotations

import logging
import random
import threading
from pathlib import Path

from hermes_nb.config import RunConfig
from hermes_nb.errors import TransferError
from hermes_nb.protocol.metrics import TRAIN_REPLAY_FRACTION
from hermes_nb.protocol.recorded_batches import read_trajectories
from hermes_nb.protocol.trajectory import ScoredDataGroup, scores_carry_signal
from hermes_nb.trainer.batches.sources import BatchSource
from hermes_nb.trainer.step.advantages import ZERO_OVERRIDE

logger = logging.getLogger(__name__)

# Spreads the replay order of resumed runs apart from the original's (any odd multiplier larger than a
# plausible step count would do).
_RESUME_SEED_STRIDE = 1_000_003


def as_on_policy(group: ScoredDataGroup) -> ScoredDataGroup:
    """The group without what ties it to the policy that sampled it (see the module doc)."""
    return group.model_copy(update={"inference_logprobs": None, "advantages": None})


def carries_signal(group: ScoredDataGroup) -> bool:
    if group.group_overrides and group.group_overrides.get(ZERO_OVERRIDE):
        return False
    return scores_carry_signal(group.scores)


def read_replay_groups(path: Path) -> list[ScoredDataGroup]:
    """Every recorded group of ``path``, on-policy; only those with signal when there are any."""
    if not path.is_file():
        raise TransferError(f"infra.replay_trajectories: {path} does not exist; replay a run that trained")
    groups = [as_on_policy(g) for _, batch in read_trajectories(path) for g in batch]
    if not groups:
        raise TransferError(f"infra.replay_trajectories: {path} holds no complete recorded step")
    with_signal = [g for g in groups if carries_signal(g)]
    if not with_signal:
        logger.warning("no replayed group has differing scores; replay will add no gradient")
    return with_signal or groups


class ReplayPool:
    """Groups in a shuffled order, reshuffled after each full pass; ``peek`` then ``take``."""

    def __init__(self, groups: list[ScoredDataGroup], seed: int) -> None:
        if not groups:
            raise ValueError("groups: a replay pool needs at least one group")
        self._groups = list(groups)
        self._rng = random.Random(seed)
        self._order: list[int] = []

    def peek(self) -> ScoredDataGroup:
        if not self._order:
            self._order = list(range(len(self._groups)))
            self._rng.shuffle(self._order)
        return self._groups[self._order[-1]]

    def take(self) -> ScoredDataGroup:
        group = self.peek()
        self._order.pop()
        return group


def _closer(current: int, size: int, target: float) -> bool:
    """Whether adding a group of ``size`` sequences brings ``current`` strictly closer to ``target``."""
    return abs(current + size - target) < abs(current - target)


def mix_batch(api_batch: list[ScoredDataGroup], pool: ReplayPool, weight: float) -> tuple[list[ScoredDataGroup], int]:
    """Replay groups making up ``weight`` of the batch's sequences, then API groups (in order) for the rest.

    Returns the mixed batch and how many of its sequences were replayed. The batch keeps the API batch's
    sequence count as closely as whole groups allow."""
    total = sum(len(g.tokens) for g in api_batch)
    replay: list[ScoredDataGroup] = []
    replayed = 0
    while _closer(replayed, len(pool.peek().tokens), weight * total):
        group = pool.take()
        replay.append(group)
        replayed += len(group.tokens)
    kept: list[ScoredDataGroup] = []
    fresh = 0
    for group in api_batch:
        if not _closer(fresh, len(group.tokens), total - replayed):
            break
        kept.append(group)
        fresh += len(group.tokens)
    return replay + kept, replayed


class ReplayMixer:
    """A batch source that mixes replay into another source's batches for steps ``<= until_step``."""

    def __init__(
        self, source: BatchSource, pool: ReplayPool, weight: float, until_step: int, start_step: int = 0
    ) -> None:
        self._source = source
        self._pool = pool
        self._weight = weight
        self._until_step = until_step
        self._step = start_step
        self._fraction = 0.0

    def next_batch(self, stop: threading.Event) -> list[ScoredDataGroup] | None:
        batch = self._source.next_batch(stop)
        if batch is None:
            return None
        self._step += 1
        if self._step > self._until_step:
            self._fraction = 0.0
            return batch
        mixed, replayed = mix_batch(batch, self._pool, self._weight)
        self._fraction = replayed / sum(len(g.tokens) for g in mixed)
        return mixed

    def batch_metrics(self) -> dict[str, float]:
        """Of the last batch handed out: the fraction of its sequences that came from the replay."""
        return {TRAIN_REPLAY_FRACTION: self._fraction}


def with_replay(source: BatchSource, config: RunConfig, start_step: int) -> BatchSource:
    """``source`` itself, or wrapped in a ``ReplayMixer`` when the config asks for replay."""
    trainer, path = config.trainer, config.infra.replay_trajectories
    if not trainer.transfer_learning or not path:
        return source
    if start_step >= trainer.fine_tune_steps:
        return source  # a resumed run already past the replay window
    pool = ReplayPool(read_replay_groups(Path(path)), seed=trainer.seed + _RESUME_SEED_STRIDE * start_step)
    logger.info(
        "replaying %s: %.0f%% of each batch until step %d", path, 100 * trainer.transfer_weight, trainer.fine_tune_steps
    )
    return ReplayMixer(source, pool, trainer.transfer_weight, trainer.fine_tune_steps, start_step)
