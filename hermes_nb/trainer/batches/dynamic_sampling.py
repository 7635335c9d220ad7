"""Dynamic sampling (DAPO, ``trainer.dynamic_sampling``): every step trains on a batch full of groups with signal.

A group carries signal when its scores tell its members apart and no ``set_advantage_to_zero`` override zeroes it
(``hermes_nb.trainer.batches.replay.carries_signal``); one without gets zero advantage everywhere and moves no weight.
``DynamicSampling`` drops such groups from each batch it pulls and pulls more until the groups kept hold at least
``batch_size`` sequences; all the kept groups of the last pull are trained on, so a batch can run a few sequences
over ``batch_size``.

The environment's ``ensure_scores_are_not_same`` (on by default) already drops equal-score groups before they are
posted, so a hermes-nb environment's batches arrive full of signal and this pulls nothing extra. It matters for
what still gets through: environments that post every group (atroposlib's process mode, an environment with that
field off) and groups zeroed by an override.

Bounds, so a hard task where no group has signal never hangs the run: the trajectory API counts every batch it
serves as one step of the run, and the environment schedules its evaluations and stops by that count. So each
extra pull is a step of the run (``batches_taken``; the loop advances its step by it), a step pulls at most
``MAX_PULLS_PER_STEP`` batches and never past ``total_steps``. When the pulls run out before the batch is full, the
step trains on the groups with signal it has; with none, on the last batch pulled, which takes no optimizer step.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from hermes_nb.config import TrainerConfig
from hermes_nb.protocol.metrics import TRAIN_GROUPS_DROPPED
from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.trainer.batches.replay import carries_signal
from hermes_nb.trainer.batches.sources import BatchSource, ReportingSource

logger = logging.getLogger(__name__)

# verl's DAPO recipe bounds its generation batches per step at 10; 8 batches of groups without signal in a row
# means the task is out of reach of the policy for now, and training on nothing then is the honest outcome.
MAX_PULLS_PER_STEP = 8


def sequences(groups: list[ScoredDataGroup]) -> int:
    return sum(g.group_size for g in groups)


class DynamicSampling:
    """A batch source that fills each batch with groups that carry signal from ``source``'s batches."""

    def __init__(self, source: BatchSource, batch_size: int, total_steps: int, start_step: int = 0) -> None:
        self._source = source
        self._batch_size = batch_size
        self._total_steps = total_steps
        self._step = start_step
        self._taken = 1
        self._dropped = 0
        self._inner: dict[str, float] = {}

    def next_batch(self, stop: threading.Event) -> list[ScoredDataGroup] | None:
        kept: list[ScoredDataGroup] = []
        last: list[ScoredDataGroup] = []
        pulls = dropped = 0
        # At least one pull, even at the last step: every step is one API batch at least (see the module doc).
        while not pulls or (sequences(kept) < self._batch_size and self._may_pull(pulls)):
            batch = self._source.next_batch(stop)
            if batch is None:
                return None
            pulls, last = pulls + 1, batch
            with_signal = [g for g in batch if carries_signal(g)]
            kept += with_signal
            dropped += len(batch) - len(with_signal)
            if isinstance(self._source, ReportingSource):
                self._inner = self._source.batch_metrics()
        self._step += pulls
        self._taken, self._dropped = pulls, dropped
        if sequences(kept) < self._batch_size:
            shown = (sequences(kept), self._batch_size, pulls)
            logger.warning("dynamic sampling: %d of %d sequences with signal after %d batches", *shown)
        return kept or last

    def _may_pull(self, pulls: int) -> bool:
        return pulls < MAX_PULLS_PER_STEP and self._step + pulls < self._total_steps

    def batches_taken(self) -> int:
        """The API batches the last ``next_batch`` pulled: the steps of the run it stands for."""
        return self._taken

    def batch_metrics(self) -> dict[str, float]:
        """Of the last batch: groups without signal dropped while filling it (and the wrapped source's metrics)."""
        return {**self._inner, TRAIN_GROUPS_DROPPED: float(self._dropped)}


class RunBounds(Protocol):
    """What dynamic sampling reads of the run's settings (the loop's ``LoopSettings``, a floor above, has them)."""

    @property
    def batch_size(self) -> int: ...

    @property
    def total_steps(self) -> int: ...

    @property
    def trainer(self) -> TrainerConfig: ...


def with_dynamic_sampling(source: BatchSource, settings: RunBounds, start_step: int) -> BatchSource:
    """``source`` itself, or wrapped in ``DynamicSampling`` when ``trainer.dynamic_sampling`` asks for it."""
    if not settings.trainer.dynamic_sampling:
        return source
    return DynamicSampling(source, settings.batch_size, settings.total_steps, start_step)
