"""The two forms of a run's trajectory API (``runs/supervision/trajectory_api_forms.py``): what each does before
the start, when probed while the run lives, and when a process of the run fails.

Real APIs on loopback; the probe reads them through the supervisor's own client. Whole runs against an external
API are tests/e2e/test_external_api_runs.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_nb.config import RunConfig, TrainerConfig
from hermes_nb.protocol.run_state import RunState
from hermes_nb.protocol.trajectory import RegisterEnv, Registration
from hermes_nb.runs.supervision import trajectory_api_forms
from hermes_nb.runs.supervision.outcomes import Launched, LaunchFailed, StopRequested
from hermes_nb.runs.supervision.ports import with_ports
from hermes_nb.runs.supervision.supervisor import Supervisor
from hermes_nb.runs.supervision.trajectory_api_forms import ApiProbe, ExternalApi, OwnedApi
from hermes_nb.system.home import run_paths
from hermes_nb.system.net import LOOPBACK, free_port
from hermes_nb.trajectory_api import SyncTrajectoryClient, TrajectoryAPIError

SECRET = "s3cret-of-this-run"
SHAPE = {"batch_size": 16, "max_token_length": 64}
FAILED = LaunchFailed(process="trainer", cause="exited with code 1", log_path="trainer.log", log_tail=["boom"])


def dead_url() -> str:
    return f"http://{LOOPBACK}:{free_port()}"


def supervisor_for(trainer: TrainerConfig, run_id: str = "20250101-120000-abcdefghjk") -> Supervisor:
    paths = run_paths(run_id)
    paths.run_dir.mkdir(parents=True)
    paths.logs["api"].parent.mkdir(parents=True, exist_ok=True)
    config = with_ports(RunConfig(trainer=trainer, env=dict(SHAPE)), free_port(), free_port())
    state = RunState(run_id=run_id, environment="arithmetic", total_steps=10, status="starting")
    return Supervisor(paths=paths, config=config, state=state, secret=SECRET)


def never_asked() -> ApiProbe:
    """A probe that fails the test if the form reads the API through it."""

    def readiness() -> None:
        raise AssertionError("the form asked the API")

    return ApiProbe(readiness=readiness, stop_requested=lambda: False, poll_seconds=0.01)


@pytest.fixture
def owned() -> Iterator[Supervisor]:
    supervisor = supervisor_for(TrainerConfig())
    yield supervisor
    supervisor.shut_down(list(supervisor.children), grace=5.0)
    supervisor.close_api()


@pytest.fixture
def external(fresh_hermes_api: str) -> Iterator[Supervisor]:
    supervisor = supervisor_for(TrainerConfig(external_api_url=fresh_hermes_api))
    yield supervisor
    supervisor.close_api()


# ---- owned ----------------------------------------------------------------------------------------------------
def test_an_owned_api_starts_from_its_command_on_the_runs_port_and_answers_only_the_runs_secret(
    owned: Supervisor,
) -> None:
    assert isinstance(owned.api_form, OwnedApi) and owned.api_form.secret == SECRET
    assert owned.process_names() == ["api", "trainer", "env"]
    command = owned.command_for("api")
    owned.launch("api", command.argv, command.environment)

    outcome = owned.wait_until("api", lambda: owned.api_readiness() is not None, 60.0, "the API's /status")

    assert isinstance(outcome, Launched)
    assert owned.config.infra.api_url == f"http://{LOOPBACK}:{owned.config.infra.api_port}"
    with SyncTrajectoryClient(owned.config.infra.api_url) as stranger, pytest.raises(TrajectoryAPIError):
        stranger.status()


def test_an_owned_api_is_not_asked_before_the_start_nor_probed_and_blames_nobody(owned: Supervisor) -> None:
    form = owned.api_form
    assert isinstance(form.before_start(owned.config, never_asked()), Launched)
    assert form.lost(never_asked()) is None
    assert form.blame(FAILED, trainer_registered=True) == FAILED
    assert form.envs_before == 0


# ---- external -------------------------------------------------------------------------------------------------
def test_an_external_api_is_never_started_and_never_gets_the_runs_secret() -> None:
    supervisor = supervisor_for(TrainerConfig(external_api_url=dead_url()))
    assert isinstance(supervisor.api_form, ExternalApi) and supervisor.api_form.secret is None
    assert supervisor.process_names() == ["trainer", "env"]
    with pytest.raises(RuntimeError, match="not the run's to start"):
        supervisor.command_for("api")


def test_an_external_api_with_this_runs_shape_is_accepted_and_its_environments_counted(
    external: Supervisor, fresh_hermes_api: str
) -> None:
    with SyncTrajectoryClient(fresh_hermes_api) as api:
        api.register(Registration(batch_size=16, max_token_len=64, num_steps=10, starting_step=0))
        api.register_env(RegisterEnv(max_token_length=64, desired_name="other", group_size=4))

    outcome = external.api_form.before_start(external.config, external.api_probe())

    assert isinstance(outcome, Launched)
    assert external.api_form.envs_before == 1  # the run's environment counts as up once a second one registers


def test_an_external_api_that_never_answers_fails_the_start_naming_its_url_and_the_supervisor_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trajectory_api_forms, "EXTERNAL_API_TIMEOUT", 0.2)
    url = dead_url()
    supervisor = supervisor_for(TrainerConfig(external_api_url=url))

    outcome = supervisor.api_form.before_start(supervisor.config, supervisor.api_probe())
    supervisor.close_api()

    assert isinstance(outcome, LaunchFailed) and outcome.process == "api"
    assert outcome.cause.startswith(f"(external, {url}) went away: trajectory API at {url} unreachable")
    assert outcome.cause.endswith("(waited 0 s)")
    assert (outcome.log_path, outcome.log_tail) == (str(supervisor.paths.logs["supervisor"]), [])


def test_a_stop_asked_for_while_waiting_for_an_external_api_stops_the_wait() -> None:
    form = ExternalApi(url=dead_url(), supervisor_log=Path("supervisor.log"))
    probe = ApiProbe(readiness=lambda: None, stop_requested=lambda: True, poll_seconds=0.01)
    assert isinstance(form.before_start(RunConfig(), probe), StopRequested)


def test_an_external_api_probed_silent_fails_the_run_only_past_its_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trajectory_api_forms, "EXTERNAL_API_GRACE", 0.3)
    url = dead_url()
    form = ExternalApi(url=url, supervisor_log=Path("supervisor.log"))
    silent = ApiProbe(readiness=lambda: None, stop_requested=lambda: False, poll_seconds=0.01)

    first = form.lost(silent)
    time.sleep(0.4)
    lost = form.lost(silent)

    assert first is None  # a hiccup is not a failure
    assert lost is not None and lost.process == "api" and lost.log_path == "supervisor.log"
    assert lost.cause.startswith(f"(external, {url}) went away: trajectory API at {url} unreachable")
    assert lost.cause.endswith("while the run was going on")


def test_an_external_api_that_answers_again_starts_its_grace_over(external: Supervisor, fresh_hermes_api: str) -> None:
    with SyncTrajectoryClient(fresh_hermes_api) as api:
        api.register(Registration(batch_size=16, max_token_len=64, num_steps=10, starting_step=0))
    form = external.api_form
    assert isinstance(form, ExternalApi)
    form.lost_since = time.monotonic() - 60.0  # silent for longer than any grace, until now

    assert form.lost(external.api_probe()) is None
    assert form.lost_since is None


def test_a_failure_while_the_external_api_is_gone_is_blamed_on_it_and_keeps_the_failing_log() -> None:
    url = dead_url()
    form = ExternalApi(url=url, supervisor_log=Path("supervisor.log"))

    blamed = form.blame(FAILED, trainer_registered=True)

    assert blamed.process == "api"
    assert blamed.cause.startswith(f"(external, {url}) went away: ")
    assert blamed.cause.endswith("; trainer exited with code 1")
    assert (blamed.log_path, blamed.log_tail) == ("trainer.log", ["boom"])


def test_a_failure_while_the_external_api_serves_is_the_failing_processs_own(fresh_hermes_api: str) -> None:
    form = ExternalApi(url=fresh_hermes_api, supervisor_log=Path("supervisor.log"))
    assert form.blame(FAILED, trainer_registered=False) == FAILED
