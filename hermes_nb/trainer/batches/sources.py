"""Where the training loop's batches come from: a batch source, and what a source may add (its metrics of the
batch it handed out, a batch that stands for several of the run's steps). The trajectory API's client is one; the
replay mix (``hermes_nb.trainer.batches.replay``) and dynamic sampling
(``hermes_nb.trainer.batches.dynamic_sampling``) wrap one."""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable

from hermes_nb.protocol.trajectory import ScoredDataGroup


class BatchSource(Protocol):
    def next_batch(self, stop: threading.Event) -> list[ScoredDataGroup] | None: ...


@runtime_checkable
class ReportingSource(Protocol):
    """A batch source with metrics about the batch it handed out last (e.g. the replay's share)."""

    def batch_metrics(self) -> dict[str, float]: ...


@runtime_checkable
class SteppingSource(Protocol):
    """A batch source whose batch can stand for several of the run's steps (dynamic sampling's extra pulls)."""

    def batches_taken(self) -> int: ...
