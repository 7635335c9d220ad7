"""Training from a trajectory API the run did not start (``trainer.external_api_url``).

Such an API is an ``atroposlib run-api`` or another hermes-nb API, already running. The run starts no API
process for it, never signals it, and reads it only through what every Atropos API answers (the client's
``readiness``: ``/status`` and ``/info``; ``/health`` where it exists).

Its step counter is the run's: environments (ours and atroposlib's) take ``starting_step`` and ``num_steps``
from the API and stop when its step reaches ``num_steps``, while the trainer counts its own steps from
``infra.start_step`` to ``total_steps``. An API keeps the settings of the first trainer that registered
(atroposlib's and ours alike) and ignores later registrations, so the two counts agree only when the API is
fresh (our trainer registers first, with ``starting_step = infra.start_step``) or already registered with this
run's shape at exactly this run's start step (a resumed run, or a start that failed before its first batch).
Anything else is refused before a process starts, with the numbers on both sides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_nb.config import RunConfig
from hermes_nb.errors import TrajectoryAPIError

if TYPE_CHECKING:
    from hermes_nb.trajectory_api.client import ApiReadiness

# An external API that is up answers /status and /info in milliseconds; a second covers a busy machine, and a
# start must not hang on an address that swallows packets.
REQUEST_TIMEOUT_S = 2.0
FIELD = "trainer.external_api_url"


def external_url(config: RunConfig) -> str | None:
    return config.trainer.external_api_url


def readiness(url: str) -> ApiReadiness:
    """The API's readiness; raises ``TrajectoryAPIError`` (``TrajectoryAPIUnavailable``: not reachable)."""
    # Imported here: the launcher reaches this module, and `import hermes_nb`'s core API loads no HTTP stack.
    from hermes_nb.trajectory_api.client import SyncTrajectoryClient

    with SyncTrajectoryClient(url, timeout=REQUEST_TIMEOUT_S) as api:
        return api.readiness()


def unusable_reason(config: RunConfig) -> str | None:
    """Why this run cannot train from its external API now (one line, naming the field), or ``None``."""
    url = external_url(config)
    if url is None:
        return None
    try:
        ready = readiness(url)
    except TrajectoryAPIError as exc:
        return (
            f"{FIELD}: {exc}; start that API first (an atroposlib run-api: `run-api --host 127.0.0.1 --port N`), "
            "or clear the field to let the run start its own"
        )
    return shape_mismatch(config, url, ready)


def shape_mismatch(config: RunConfig, url: str, ready: ApiReadiness) -> str | None:
    """Why an API that already has a trainer registered cannot serve this run, or ``None`` (see the module doc)."""
    if not ready.trainer_registered:
        return None
    wanted = (int(config.env_value("batch_size")), int(config.env_value("max_token_length")), config.infra.start_step)
    found = (ready.batch_size, ready.max_token_len, ready.current_step)
    if found == wanted:
        return None
    return (
        f"{FIELD}: the trajectory API at {url} already serves a trainer registered with batch_size {found[0]} and "
        f"max_token_len {found[1]}, now at step {found[2]}; this run needs batch_size {wanted[0]} and "
        f"max_token_len {wanted[1]} from step {wanted[2]}, and an API keeps its first trainer's settings: restart "
        f"it (a run-api keeps them until it restarts), or reset it with GET {url}/reset_data if nothing else uses it"
    )


def gone_reason(url: str, trainer_registered: bool) -> str | None:
    """Why the external API can no longer serve a run whose trainer had (``trainer_registered``) or had not yet
    registered: it stopped answering, or it forgot the trainer (restarted or reset). ``None`` when it is fine."""
    try:
        ready = readiness(url)
    except TrajectoryAPIError as exc:
        return f"went away: {exc}"
    if trainer_registered and not ready.trainer_registered:
        return "forgot this run's trainer (it was restarted or reset, GET /reset_data)"
    return None
