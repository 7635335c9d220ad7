"""``rl_stop_training`` waits as long as the supervisor may take to stop a run, whatever its graces are set to."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator

import psutil
import pytest
from run_dirs import write_state

from hermes_nb.config import RunConfig
from hermes_nb.errors import RunStateError
from hermes_nb.protocol.run_state import ProcessRecord, RunState
from hermes_nb.runs.supervision import graces, stop
from hermes_nb.runs.supervision.supervisor import Child, Supervisor
from hermes_nb.system.home import run_paths

RUN_ID = "20250101-120000-abcdefghjk"


def _ignore_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@pytest.fixture
def stubborn() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes that ignore SIGTERM, each in its own session (the way the supervisor starts a run's processes)."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait(10)


def _start_stubborn(started: list[subprocess.Popen[bytes]], name: str) -> ProcessRecord:
    # SIG_IGN is set before exec and survives it, so no SIGTERM can arrive before the process ignores it.
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True, preexec_fn=_ignore_sigterm)
    started.append(proc)
    return ProcessRecord(name=name, pid=proc.pid, started_at=psutil.Process(proc.pid).create_time())


class FakeClock:
    """``stop``'s view of time: sleeping advances it at once, so a wait of minutes takes a moment."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_longer_trainer_grace_makes_the_stop_wait_longer(
    stubborn: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A big model's final checkpoint: the supervisor gives the trainer ten minutes; stop must not give up sooner.
    monkeypatch.setattr(graces, "TRAINER_STOP_GRACE", 600.0)
    write_state(RUN_ID, "running", processes={"supervisor": _start_stubborn(stubborn, "supervisor")})
    clock = FakeClock()
    monkeypatch.setattr(stop, "time", clock)
    monkeypatch.setattr(stop, "POLL_SECONDS", 1.0)  # fewer polls of the fake clock; the wait is the same

    with pytest.raises(RunStateError, match="did not stop within"):
        stop.stop_run(RUN_ID)

    assert clock.now > 600.0


def test_the_supervisors_real_worst_case_stop_fits_in_its_stop_budget(
    stubborn: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every process ignores SIGTERM, so each grace is waited out in full, as in the worst case. The budget's slack
    over the graces waited is one peer grace (the wait after SIGKILL, which ends at once): 2 s graces keep a loaded
    machine's polling and signalling well inside it, while a stop that waited one grace too many still fails."""
    monkeypatch.setattr(graces, "TRAINER_STOP_GRACE", 2.0)
    monkeypatch.setattr(graces, "PEER_STOP_GRACE", 2.0)
    paths = run_paths(RUN_ID)
    paths.run_dir.mkdir(parents=True)
    records = {name: _start_stubborn(stubborn, name) for name in ("api", "trainer", "env")}
    state = RunState(run_id=RUN_ID, environment="arithmetic", status="running", total_steps=10, processes=dict(records))
    supervisor = Supervisor(paths=paths, config=RunConfig(), state=state)
    for name, proc in zip(records, stubborn, strict=True):
        supervisor.children[name] = Child(record=records[name], popen=proc)
    # A process outside the run's groups, like W&B's service, which must be found and ended on its own.
    outsider = _start_stubborn(stubborn, "env")
    supervisor.seen_descendants[outsider.pid] = psutil.Process(outsider.pid)

    started = time.monotonic()
    supervisor.stop()
    elapsed = time.monotonic() - started

    assert supervisor.state.status == "stopped"
    assert elapsed >= graces.TRAINER_STOP_GRACE + 2 * graces.PEER_STOP_GRACE  # every grace was waited out
    assert elapsed <= graces.supervisor_stop_seconds()
