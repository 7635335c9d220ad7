"""The trajectory API: the queue between environments (which post scored groups) and the trainer (which pulls
batches), speaking the Atropos wire protocol (``hermes_nb.protocol.trajectory``).

Run it with ``python -m hermes_nb.trajectory_api --host 127.0.0.1 --port N``; build the app in-process with
``hermes_nb.trajectory_api.server.create_app`` (that module imports FastAPI, this one does not); talk to it
with :class:`TrajectoryClient` (async) or :class:`SyncTrajectoryClient`.

Semantics are atroposlib's (``atroposlib/api/server.py`` and ``utils.py``). Where we differ, on purpose:

- ``/register-env`` succeeds once the trainer has registered; atroposlib waits for its first ``/batch``.
- One batch is formed per ``/batch`` call and ``current_step`` counts batches served; atroposlib forms every
  batch the queue allows at once, counts them all, and serves them last-formed first.
- Groups buffered until they combine into an environment's ``group_size`` stay together as one queue unit,
  so they pack like a group of that size (atroposlib queues them separately, where a lone 3 next to a 1 never
  packs). ``queue_size`` counts such units.
- When packing cannot form a batch although enough sequences wait (a batch size that is not a multiple of
  the group sizes), any oldest-first exact subset of whole groups is used; atroposlib waits forever.
- ``/status-env`` does not mutate the environment's registered group size; with no positive weight anywhere
  it reports ``env_weight`` 1.0 (atroposlib divides by zero). Env weights, as in atroposlib, only shape that
  reported share of inference; batch composition follows ``min_batch_allocation``.
- Refused, with a 4xx naming the field and nothing queued: misaligned groups, empty groups or sequences,
  sequences longer than the trainer's ``max_token_len``, groups larger than the sender's registered
  ``group_size`` (atroposlib buffers those forever), non-finite numbers, bodies over the size limit
  (decompressed), and ``scored_data_list`` requests with any bad group (all or nothing).
- With a cap on sequences held (``--max-queued-sequences``; a run sets it from ``trainer.max_queued_batches``),
  a post past it is refused whole with 503 + ``Retry-After`` (atroposlib's environments retry a 5xx), and
  ``/status-env`` adds ``queue_room``, the sequences that still fit; atroposlib's API has no cap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hermes_nb.trajectory_api.client import (
        ApiReadiness,
        SyncTrajectoryClient,
        TrajectoryAPIError,
        TrajectoryAPIUnavailable,
        TrajectoryClient,
    )
    from hermes_nb.trajectory_api.state import ApiLimits, RequestRejected, TrajectoryState

__all__ = [
    "ApiLimits",
    "ApiReadiness",
    "RequestRejected",
    "SyncTrajectoryClient",
    "TrajectoryAPIError",
    "TrajectoryAPIUnavailable",
    "TrajectoryClient",
    "TrajectoryState",
]

# Imported on first use: the server process never needs httpx, and the client never needs the state.
_HOMES = {
    "ApiReadiness": "client",
    "SyncTrajectoryClient": "client",
    "TrajectoryAPIError": "client",
    "TrajectoryAPIUnavailable": "client",
    "TrajectoryClient": "client",
    "ApiLimits": "state",
    "RequestRejected": "state",
    "TrajectoryState": "state",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
