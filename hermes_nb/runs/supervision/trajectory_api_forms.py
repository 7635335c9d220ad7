"""The two forms a run's trajectory API takes, as the supervisor sees it: one the run owns, or an external one.

- :class:`OwnedApi`: the run launches it (its command line, on the run's API port), it requires the run's secret,
  and it is one of the run's processes: its exit is watched and it is stopped with the run like the others.
- :class:`ExternalApi` (``trainer.external_api_url``, ``hermes_nb.runs.supervision.external_trajectory_api``): already
  running; checked before the run starts anything, probed while the run lives, and blamed for a failure while it
  is gone. It is never started, never signalled, and never sent the run's secret.

The supervisor asks its form and never which form it has; :func:`api_form` is the one place that picks.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from hermes_nb.config import RunConfig
from hermes_nb.runs.supervision import external_trajectory_api
from hermes_nb.runs.supervision.outcomes import Launched, LaunchFailed, LaunchOutcome, StopRequested
from hermes_nb.system.net import LOOPBACK
from hermes_nb.trajectory_api.client import ApiReadiness

log = logging.getLogger("hermes_nb.supervisor")

# An external API is already running when the run starts (the launcher checked that it answers); this covers
# one that was started a moment before the run, and nothing longer: a wrong address should fail fast.
EXTERNAL_API_TIMEOUT = 10.0
# During the run an external API is probed each second; this long without an answer and the run fails naming
# it. A loaded machine can stall an API for a second or two (run-api serialises a large batch on its event
# loop); the trainer, whose next request fails at once, usually names a vanished API sooner than this.
EXTERNAL_API_GRACE = 10.0


@dataclass(frozen=True)
class ApiProbe:
    """How a form reads the run's API: the supervisor's one client (``None`` while the API cannot answer),
    whether a stop has been asked for, and how long to wait between two start-up polls."""

    readiness: Callable[[], ApiReadiness | None]
    stop_requested: Callable[[], bool]
    poll_seconds: float


class TrajectoryApiForm(Protocol):
    # Whether the API is one of the run's processes (``"api"``), started, watched and stopped with the run.
    launched: bool
    # What the run's clients of this API send (``protocol.auth``): the run's secret, or none for an API not ours.
    secret: str | None
    # Environments the API counted before this run's own registered (an external API may have others).
    envs_before: int

    def command(self, config: RunConfig) -> list[str]: ...
    def before_start(self, config: RunConfig, probe: ApiProbe) -> LaunchOutcome: ...
    def lost(self, probe: ApiProbe) -> LaunchFailed | None: ...
    def blame(self, failed: LaunchFailed, trainer_registered: bool) -> LaunchFailed: ...


def api_form(config: RunConfig, secret: str | None, supervisor_log: Path) -> TrajectoryApiForm:
    """The form of ``config``'s API; ``supervisor_log`` is the log an external API's failures name (the run has
    no log of an API it did not start)."""
    url = external_trajectory_api.external_url(config)
    if url is None:
        return OwnedApi(secret=secret)
    return ExternalApi(url=url, supervisor_log=supervisor_log)


@dataclass
class OwnedApi:
    """The run's own API: a child process like the trainer, so its failures are its exit, seen by the watch."""

    secret: str | None = field(default=None, repr=False)
    launched: bool = field(default=True, init=False)
    envs_before: int = field(default=0, init=False)

    def command(self, config: RunConfig) -> list[str]:
        return [
            sys.executable,
            "-m",
            "hermes_nb.trajectory_api",
            "--host",
            LOOPBACK,
            "--port",
            str(config.infra.api_port),
            "--max-queued-sequences",
            str(config.max_queued_sequences()),
        ]

    def before_start(self, config: RunConfig, probe: ApiProbe) -> LaunchOutcome:
        """Nothing to check: it starts with the run, and its readiness is the first of the start-up waits."""
        return Launched()

    def lost(self, probe: ApiProbe) -> LaunchFailed | None:
        """Never lost while it runs: an API that goes away exits, and the watch names that exit."""
        return None

    def blame(self, failed: LaunchFailed, trainer_registered: bool) -> LaunchFailed:
        """A failure is the failing process's own: had the API gone, its exit would be the one named."""
        return failed


@dataclass
class ExternalApi:
    """An API the run did not start: every failure it causes names it as ``api (external, URL)``."""

    url: str
    supervisor_log: Path
    secret: str | None = field(default=None, init=False)
    launched: bool = field(default=False, init=False)
    envs_before: int = field(default=0, init=False)
    # Since when the watch's probes have failed (None: it answered last time).
    lost_since: float | None = field(default=None, init=False)

    def command(self, config: RunConfig) -> list[str]:
        raise RuntimeError(f"the external trajectory API at {self.url} is not the run's to start")

    def before_start(self, config: RunConfig, probe: ApiProbe) -> LaunchOutcome:
        """It answers (waiting briefly) and can serve this run from its start step."""
        deadline = time.monotonic() + EXTERNAL_API_TIMEOUT
        while (ready := probe.readiness()) is None and time.monotonic() < deadline and not probe.stop_requested():
            time.sleep(probe.poll_seconds)
        if probe.stop_requested():
            return StopRequested()
        if ready is None:
            reason = external_trajectory_api.gone_reason(self.url, trainer_registered=False) or "did not answer"
            return self.failure(f"{reason} (waited {EXTERNAL_API_TIMEOUT:.0f} s)")
        mismatch = external_trajectory_api.shape_mismatch(config, self.url, ready)
        if mismatch is not None:
            return self.failure(mismatch)
        self.envs_before = ready.num_envs or 0
        log.info("training from the external trajectory API at %s (step %d)", self.url, ready.current_step)
        return Launched()

    def lost(self, probe: ApiProbe) -> LaunchFailed | None:
        """The failure to record once the API has stopped answering, or forgotten the trainer, for
        ``EXTERNAL_API_GRACE`` seconds; ``None`` while it serves (or for a short hiccup). The trainer and the
        environment notice only at their next request, which a long training step can put off for minutes."""
        ready = probe.readiness()
        if ready is not None and ready.trainer_registered:
            self.lost_since = None
            return None
        now = time.monotonic()
        self.lost_since = self.lost_since or now
        if now - self.lost_since < EXTERNAL_API_GRACE:
            return None
        reason = external_trajectory_api.gone_reason(self.url, trainer_registered=True) or "stopped answering"
        return self.failure(f"{reason} while the run was going on")

    def blame(self, failed: LaunchFailed, trainer_registered: bool) -> LaunchFailed:
        """When the API went away (or forgot the trainer), that is the cause of whatever failed, and the failure
        names it; the process that noticed it, and its log, follow."""
        gone = external_trajectory_api.gone_reason(self.url, trainer_registered=trainer_registered)
        if gone is None:
            return failed
        cause = f"(external, {self.url}) {gone}; {failed.process} {failed.cause}"
        return failed.model_copy(update={"process": "api", "cause": cause})

    def failure(self, cause: str) -> LaunchFailed:
        return LaunchFailed(
            process="api", cause=f"(external, {self.url}) {cause}", log_path=str(self.supervisor_log), log_tail=[]
        )
