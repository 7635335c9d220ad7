"""Training from an external trajectory API (``trainer.external_api_url``): readiness read from what every Atropos
API answers, the field's validation, the refusals before anything starts, and the supervisor's view of it.

Real servers on loopback: hermes-nb's API and atroposlib's ``run-api`` (the atropos side environment); nothing
trains here (tests/e2e/test_external_api_runs.py runs whole runs).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from external_apis import api_process

from hermes_nb.api import rl_edit_config, rl_select_environment, rl_start_training
from hermes_nb.config import RunConfig, TrainerConfig
from hermes_nb.errors import ConfigError, HermesNBError
from hermes_nb.protocol.run_state import RunState
from hermes_nb.protocol.trajectory import RegisterEnv, Registration
from hermes_nb.runs.run_dirs import known_run_ids
from hermes_nb.runs.supervision import trajectory_api_forms
from hermes_nb.runs.supervision.ports import with_ports
from hermes_nb.runs.supervision.supervisor import Supervisor
from hermes_nb.system.home import run_paths
from hermes_nb.system.net import LOOPBACK, free_port
from hermes_nb.trajectory_api import SyncTrajectoryClient

RUN_ID = "20250101-120000-abcdefghjk"
ENV = RegisterEnv(max_token_length=64, desired_name="count", group_size=4)


def registration(batch_size: int = 16, max_token_len: int = 64, starting_step: int = 0) -> Registration:
    return Registration(batch_size=batch_size, max_token_len=max_token_len, num_steps=10, starting_step=starting_step)


@pytest.fixture(scope="module")
def run_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """One run-api for the module; each test resets it (GET /reset_data) before use."""
    log = tmp_path_factory.mktemp("run_api") / "run_api.log"
    with api_process("atropos", log) as (url, _):
        yield url, log


@pytest.fixture
def fresh_run_api(run_api: tuple[str, Path]) -> str:
    url, _ = run_api
    with SyncTrajectoryClient(url) as api:
        api.reset_data()
    return url


def dead_url() -> str:
    return f"http://{LOOPBACK}:{free_port()}"


# ---- readiness: one place, every Atropos API --------------------------------------------------------------
def test_run_api_readiness_reads_status_and_info_and_cannot_count_environments(fresh_run_api: str) -> None:
    with SyncTrajectoryClient(fresh_run_api) as api:
        before = api.readiness()
        api.register(registration(batch_size=8, max_token_len=32, starting_step=5))
        after = api.readiness()

    assert (before.current_step, before.trainer_registered, before.num_envs) == (0, False, None)
    assert (after.current_step, after.batch_size, after.max_token_len) == (5, 8, 32)
    assert after.trainer_registered and after.num_envs is None


def test_readiness_asks_a_run_api_for_health_once_not_on_every_poll(run_api: tuple[str, Path]) -> None:
    url, log = run_api
    asked_before = log.read_text().count("GET /health")
    with SyncTrajectoryClient(url) as api:
        for _ in range(5):
            api.readiness()
    logged = access_lines_through(url, log)
    assert logged.count("GET /health") - asked_before == 1


def access_lines_through(url: str, log: Path) -> str:
    """The API's log once it holds the access line of a marker request sent now: uvicorn logs requests in the
    order it answers them, so every earlier request's line is there too."""
    marker = f"/status?marker={uuid.uuid4().hex}"
    httpx.get(url + marker, timeout=10)
    deadline = time.monotonic() + 30.0
    while marker not in (text := log.read_text()):
        assert time.monotonic() < deadline, f"no access line for {marker} in {log} within 30 s"
        time.sleep(0.02)
    return text


def test_hermes_api_readiness_counts_the_registered_environments(fresh_hermes_api: str) -> None:
    with SyncTrajectoryClient(fresh_hermes_api) as api:
        api.register(registration())
        api.register_env(ENV)
        ready = api.readiness()
    assert (ready.trainer_registered, ready.batch_size, ready.num_envs, ready.current_step) == (True, 16, 1, 0)


def test_readiness_of_nothing_raises_unavailable_and_or_none_is_none() -> None:
    with SyncTrajectoryClient(dead_url()) as api:
        assert api.readiness_or_none() is None
        with pytest.raises(HermesNBError, match="unreachable on /status"):
            api.readiness()


# ---- the setting ------------------------------------------------------------------------------------------
def test_the_url_setting_is_normalised_and_a_bad_one_names_the_field_and_what_is_accepted() -> None:
    assert TrainerConfig(external_api_url=" http://127.0.0.1:8000/ ").external_api_url == "http://127.0.0.1:8000"
    assert TrainerConfig(external_api_url="").external_api_url is None
    asyncio.run(rl_select_environment("arithmetic"))
    with pytest.raises(HermesNBError, match=r"trainer\.external_api_url: .*http\(s\) URL such as http://127"):
        asyncio.run(rl_edit_config("trainer.external_api_url", "127.0.0.1:8000"))


def test_with_ports_points_the_run_and_its_environment_at_the_external_api() -> None:
    config = RunConfig(trainer=TrainerConfig(external_api_url="http://127.0.0.1:9999"))
    resolved = with_ports(config, 41000, 41001)
    assert (resolved.infra.api_url, resolved.infra.api_port) == ("http://127.0.0.1:9999", None)
    assert resolved.env["rollout_server_url"] == "http://127.0.0.1:9999"
    assert resolved.infra.inference_port == 41001


# ---- refused before anything starts -----------------------------------------------------------------------
@pytest.fixture
def arithmetic() -> None:
    asyncio.run(rl_select_environment("arithmetic"))
    asyncio.run(rl_edit_config({"batch_size": 16, "max_token_length": 64}))


@pytest.mark.usefixtures("arithmetic")
def test_an_external_api_that_does_not_answer_refuses_the_start_and_creates_nothing() -> None:
    url = dead_url()
    with pytest.raises(ConfigError, match=f"trainer.external_api_url: trajectory API at {url} unreachable"):
        asyncio.run(rl_start_training(**{"trainer.external_api_url": url}))
    assert known_run_ids() == []


@pytest.mark.usefixtures("arithmetic")
def test_an_external_api_serving_another_trainer_refuses_the_start_with_both_shapes(fresh_run_api: str) -> None:
    with SyncTrajectoryClient(fresh_run_api) as api:
        api.register(registration(batch_size=64, starting_step=7))
    with pytest.raises(ConfigError) as refused:
        asyncio.run(rl_start_training(**{"trainer.external_api_url": fresh_run_api}))
    message = str(refused.value)
    assert "already serves a trainer registered with batch_size 64 and max_token_len 64, now at step 7" in message
    assert "this run needs batch_size 16 and max_token_len 64 from step 0" in message
    assert known_run_ids() == []


@pytest.mark.usefixtures("arithmetic")
def test_an_external_api_with_this_runs_shape_at_its_start_step_is_accepted(fresh_run_api: str) -> None:
    # e.g. a start that failed before its first batch, tried again: the API kept the first registration.
    from hermes_nb.runs.supervision.external_trajectory_api import unusable_reason
    from hermes_nb.selection import session

    with SyncTrajectoryClient(fresh_run_api) as api:
        api.register(registration(batch_size=16, max_token_len=64, starting_step=0))
    config = session.load().config
    trainer = config.trainer.model_copy(update={"external_api_url": fresh_run_api})
    config = config.model_copy(update={"trainer": trainer})
    assert unusable_reason(config) is None


@pytest.mark.usefixtures("arithmetic")
def test_not_starting_the_environment_needs_an_external_api() -> None:
    with pytest.raises(ConfigError, match="trainer.start_environment: false needs trainer.external_api_url"):
        asyncio.run(rl_start_training(**{"trainer.start_environment": False}))
    assert known_run_ids() == []


# ---- the supervisor -----------------------------------------------------------------------------------------
def supervisor_for(trainer: TrainerConfig, status: str = "running", run_id: str = RUN_ID) -> Supervisor:
    paths = run_paths(run_id)
    paths.run_dir.mkdir(parents=True)
    paths.logs["trainer"].parent.mkdir(parents=True, exist_ok=True)
    config = with_ports(RunConfig(trainer=trainer), free_port(), free_port())
    state = RunState(run_id=run_id, environment="arithmetic", total_steps=10, status=status)
    return Supervisor(paths=paths, config=config, state=state)


def test_the_supervisor_starts_no_api_for_an_external_one_and_no_environment_when_told() -> None:
    url = "http://127.0.0.1:9999"
    assert supervisor_for(TrainerConfig()).process_names() == ["api", "trainer", "env"]
    external = supervisor_for(TrainerConfig(external_api_url=url), run_id="20250101-120001-abcdefghjk")
    assert external.process_names() == ["trainer", "env"]
    fed_elsewhere = TrainerConfig(external_api_url=url, start_environment=False)
    assert supervisor_for(fed_elsewhere, run_id="20250101-120002-abcdefghjk").process_names() == ["trainer"]


def test_a_process_failing_after_the_external_api_went_away_is_blamed_on_the_api() -> None:
    url = dead_url()
    supervisor = supervisor_for(TrainerConfig(external_api_url=url))
    child = supervisor.launch("trainer", ["sh", "-c", "echo 'TrajectoryAPIUnavailable: /batch' >&2; exit 1"])
    child.popen.wait(10)

    failed = supervisor.failure("trainer", "while the run was going on")

    assert failed.process == "api"
    assert failed.cause.startswith(f"(external, {url}) went away: trajectory API at {url} unreachable on /status")
    assert "; trainer exited with code 1 while the run was going on" in failed.cause
    assert failed.log_path == str(supervisor.paths.logs["trainer"])
    assert "TrajectoryAPIUnavailable: /batch" in failed.log_tail[-1]


def test_the_watch_fails_the_run_once_the_external_api_stays_silent_past_its_grace(
    monkeypatch: pytest.MonkeyPatch, fresh_hermes_api: str
) -> None:
    monkeypatch.setattr(trajectory_api_forms, "EXTERNAL_API_GRACE", 0.3)
    with SyncTrajectoryClient(fresh_hermes_api) as api:
        api.register(registration())
    answering = supervisor_for(TrainerConfig(external_api_url=fresh_hermes_api))
    url = dead_url()
    silent = supervisor_for(TrainerConfig(external_api_url=url), run_id="20250101-120001-abcdefghjk")

    assert answering.api_form.lost(answering.api_probe()) is None
    assert silent.api_form.lost(silent.api_probe()) is None  # a hiccup is not a failure
    time.sleep(0.4)
    lost = silent.api_form.lost(silent.api_probe())
    for supervisor in (answering, silent):
        supervisor.close_api()

    assert lost is not None and lost.process == "api"
    assert lost.cause.startswith(f"(external, {url}) went away: trajectory API at {url} unreachable")
    assert lost.cause.endswith("while the run was going on")


def test_a_process_failing_while_the_external_api_is_fine_is_its_own_failure(fresh_hermes_api: str) -> None:
    supervisor = supervisor_for(TrainerConfig(external_api_url=fresh_hermes_api), status="starting")
    child = supervisor.launch("trainer", ["sh", "-c", "exit 3"])
    child.popen.wait(10)
    assert supervisor.failure("trainer", "during start-up").process == "trainer"


def test_an_external_api_that_forgot_the_running_trainer_is_named(fresh_hermes_api: str) -> None:
    # A restarted or reset API answers, but no longer knows the run's trainer.
    supervisor = supervisor_for(TrainerConfig(external_api_url=fresh_hermes_api))
    child = supervisor.launch("trainer", ["sh", "-c", "exit 1"])
    child.popen.wait(10)
    failed = supervisor.failure("trainer", "while the run was going on")
    assert (failed.process, "forgot this run's trainer" in failed.cause) == ("api", True)


def test_the_start_fails_naming_an_external_api_that_serves_another_shape(fresh_hermes_api: str) -> None:
    supervisor = supervisor_for(TrainerConfig(external_api_url=fresh_hermes_api), status="starting")
    with SyncTrajectoryClient(fresh_hermes_api) as api:
        api.register(registration(batch_size=64))
    outcome = supervisor.api_form.before_start(supervisor.config, supervisor.api_probe())
    supervisor.close_api()
    assert outcome.process == "api"  # type: ignore[union-attr]
    assert "already serves a trainer registered with batch_size 64" in outcome.cause  # type: ignore[union-attr]
    assert supervisor.children == {}
