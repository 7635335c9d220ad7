"""The per-run secret: a run's servers answer only requests that carry it (bearer API key or capability URL
prefix), unmodified clients (our trajectory client, the real ``openai`` SDK) get through with it, its files are
private, and it is hidden wherever it is shown."""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai  # the dev extra installs it: a missing SDK fails here rather than skipping the round trip
import pytest
import torch
import yaml

from hermes_nb.protocol.auth import SECRET_ENV, capability_url
from hermes_nb.protocol.run_files import ATROPOS_SERVE_FILE, RUN_SECRET_FILE
from hermes_nb.system import home
from hermes_nb.system import secrets as run_secrets
from hermes_nb.system.home import run_paths
from hermes_nb.system.net import LOOPBACK, free_port
from hermes_nb.system.processes import spawn_group
from hermes_nb.system.secrets import redact
from hermes_nb.trajectory_api.client import SyncTrajectoryClient, TrajectoryAPIError

torch.set_num_threads(1)

SECRET = secrets.token_urlsafe(32)
WRONG = secrets.token_urlsafe(32)
API_START_TIMEOUT_S = 30.0


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real trajectory API process started as a run starts it: the secret in its environment, not its argv."""
    port = free_port()
    log = tmp_path_factory.mktemp("api") / "api.log"
    env = {**os.environ, SECRET_ENV: SECRET}
    proc = spawn_group([sys.executable, "-m", "hermes_nb.trajectory_api", "--port", str(port)], log, env)
    url = f"http://{LOOPBACK}:{port}"
    try:
        deadline = time.monotonic() + API_START_TIMEOUT_S
        with SyncTrajectoryClient(url, secret=SECRET) as api:
            while api.health_or_none(timeout=1.0) is None:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/health"), ("GET", "/status"), ("GET", "/batch"), ("POST", "/scored_data"), ("POST", "/reset_data")],
)
def test_the_trajectory_api_answers_401_with_a_json_error_without_the_secret(
    api_url: str, method: str, path: str
) -> None:
    response = httpx.request(method, api_url + path, json={}, timeout=5)

    assert response.status_code == 401
    assert "secret" in response.json()["detail"] and response.json()["error"]["message"]
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "ask",
    [
        lambda url: httpx.get(f"{url}/status", headers={"Authorization": f"Bearer {WRONG}"}, timeout=5),
        lambda url: httpx.get(f"{capability_url(url, WRONG)}/status", timeout=5),
        lambda url: httpx.get(f"{url}/status", headers={"Authorization": f"Basic {SECRET}"}, timeout=5),
        lambda url: httpx.get(f"{url}/{SECRET[:-1]}/status", timeout=5),
    ],
    ids=["wrong bearer", "wrong prefix", "right secret, wrong scheme", "prefix of the secret"],
)
def test_the_trajectory_api_answers_401_to_a_wrong_secret(api_url: str, ask: object) -> None:
    assert callable(ask)
    assert ask(api_url).status_code == 401


def test_the_trajectory_api_answers_the_secret_as_bearer_and_as_url_prefix(api_url: str) -> None:
    bearer = httpx.get(f"{api_url}/status", headers={"Authorization": f"Bearer {SECRET}"}, timeout=5)
    prefixed = httpx.get(f"{capability_url(api_url, SECRET)}/status", timeout=5)

    assert bearer.status_code == prefixed.status_code == 200
    assert bearer.json() == prefixed.json()


def test_the_trajectory_client_sends_the_secret_and_fails_clearly_without_it(api_url: str) -> None:
    with SyncTrajectoryClient(api_url, secret=SECRET) as api:
        assert api.readiness().current_step == 0
    with SyncTrajectoryClient(capability_url(api_url, SECRET)) as api:
        assert api.readiness().current_step == 0
    with SyncTrajectoryClient(api_url) as api, pytest.raises(TrajectoryAPIError) as refused:
        api.status()
    assert refused.value.status_code == 401


@pytest.fixture(scope="module")
def inference_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The inference server, in-process as the trainer runs it, with the run's secret in the environment."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hermes_nb.inference.contract import Policy
    from hermes_nb.inference.engine import InferenceEngine
    from hermes_nb.inference.server import InferenceServer
    from hermes_nb.testing import make_tiny_model

    path = make_tiny_model(tmp_path_factory.mktemp("tiny"))
    with pytest.MonkeyPatch.context() as env:
        env.setenv(SECRET_ENV, SECRET)
        server = InferenceServer(InferenceEngine(seed=0), free_port())
    server.start()
    model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    server.engine.publish(
        Policy(model=model, tokenizer=AutoTokenizer.from_pretrained(str(path)), version=0, name="tiny")
    )
    try:
        yield f"http://{LOOPBACK}:{server.port}"
    finally:
        server.stop()


def test_the_openai_sdk_reaches_the_inference_server_with_the_secret_as_its_api_key(inference_url: str) -> None:
    client = openai.OpenAI(base_url=f"{inference_url}/v1", api_key=SECRET, max_retries=0)

    answer = client.completions.create(model="tiny", prompt="1 + 1 =", max_tokens=3, temperature=0.0)

    assert answer.choices[0].finish_reason in {"length", "stop"}


def test_the_openai_sdk_reaches_the_inference_server_by_a_capability_base_url(inference_url: str) -> None:
    client = openai.OpenAI(base_url=capability_url(f"{inference_url}/v1", SECRET), api_key="-", max_retries=0)

    answer = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=3, temperature=0.0
    )

    assert len(answer.choices) == 1


@pytest.mark.parametrize("key", [WRONG, "-"])
def test_the_openai_sdk_gets_an_authentication_error_without_the_right_secret(inference_url: str, key: str) -> None:
    client = openai.OpenAI(base_url=f"{inference_url}/v1", api_key=key, max_retries=0)

    with pytest.raises(openai.AuthenticationError, match="secret"):
        client.completions.create(model="tiny", prompt="1 + 1 =", max_tokens=3)


@pytest.mark.parametrize("path", ["/health", "/v1/models", "/generate"])
def test_the_inference_server_answers_401_without_the_secret_health_included(inference_url: str, path: str) -> None:
    response = httpx.request("POST" if path == "/generate" else "GET", inference_url + path, json={}, timeout=5)

    assert response.status_code == 401 and "secret" in response.json()["error"]["message"]
    authorized = httpx.get(f"{inference_url}/health", headers={"Authorization": f"Bearer {SECRET}"}, timeout=5)
    assert authorized.status_code == 200


def test_home_runs_logs_and_run_folders_are_0700_and_the_secret_file_0600(hermes_home: Path) -> None:
    os.chmod(hermes_home, 0o755)  # a home made earlier under the default umask
    run_secrets.private_home()
    run_dir = run_secrets.private_dir(home.run_dir("r1"))

    secret = run_secrets.create_run_secret(run_dir)

    for folder in (hermes_home, home.runs_dir(), home.logs_dir(), run_dir):
        assert _mode(folder) == 0o700, folder
    assert _mode(run_dir / RUN_SECRET_FILE) == 0o600
    assert run_secrets.read_run_secret(run_dir) == secret and len(secret) >= 43


def test_each_run_gets_its_own_secret(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()

    assert run_secrets.create_run_secret(tmp_path / "a") != run_secrets.create_run_secret(tmp_path / "b")


def test_a_run_made_before_secrets_has_none(tmp_path: Path) -> None:
    assert run_secrets.read_run_secret(tmp_path) is None


def test_log_files_of_run_processes_are_0600(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "trainer_r1.log"

    spawn_group([sys.executable, "-c", "print('hello')"], log).wait(10)

    assert _mode(log) == 0o600 and log.read_text() == "hello\n"


def test_a_run_secret_read_in_this_process_is_redacted_wherever_shown(tmp_path: Path) -> None:
    secret = run_secrets.create_run_secret(tmp_path)
    url = capability_url("http://127.0.0.1:4200/v1", secret)

    shown = redact({"inference_url": url, "lines": [f"error at {url}"]})

    assert secret not in str(shown)
    assert shown["inference_url"] == "http://127.0.0.1:4200/***/v1"


def test_a_run_process_redacts_its_own_secret_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    own = secrets.token_urlsafe(32)
    monkeypatch.setenv(SECRET_ENV, own)

    assert redact(f"key {own}") == "key ***"


def test_capability_urls_put_the_secret_first_in_the_path() -> None:
    assert capability_url("http://127.0.0.1:9/v1", "S") == "http://127.0.0.1:9/S/v1"
    assert capability_url("http://127.0.0.1:9/", "S") == "http://127.0.0.1:9/S"
    assert capability_url("http://127.0.0.1:9", None) == "http://127.0.0.1:9"


def test_the_atroposlib_serve_settings_carry_the_secret_in_a_private_file(tmp_path: Path) -> None:
    from hermes_nb.config import EnvironmentRef, InfraConfig, RunConfig
    from hermes_nb.frameworks import registry
    from hermes_nb.frameworks.contract import ServeRequest

    config = RunConfig(
        environment=EnvironmentRef(name="add", class_name="AddEnv", file="/envs/add.py", framework="atroposlib"),
        env={"group_size": 4, "batch_size": 16, "total_steps": 6},
        infra=InfraConfig(
            run_dir=str(tmp_path),
            api_url="http://127.0.0.1:4100",
            inference_url="http://127.0.0.1:4200",
            env_python="/venvs/atropos/bin/python",
        ),
    )
    paths = run_paths("20260101-000000-aaaaaaaaaa").model_copy(update={"run_dir": tmp_path})

    request = ServeRequest(config=config, paths=paths, base_environment={}, secret=SECRET, api_secret=SECRET)
    command = registry.adapter("atroposlib").serve(request)
    command.write_files()
    argv = command.argv

    settings_path = tmp_path / ATROPOS_SERVE_FILE
    settings = yaml.safe_load(settings_path.read_text())
    assert _mode(settings_path) == 0o600
    assert settings["env"]["rollout_server_url"] == f"http://127.0.0.1:4100/{SECRET}"
    assert settings["openai"]["api_key"] == SECRET and settings["openai"]["base_url"] == "http://127.0.0.1:4200/v1"
    assert not any(SECRET in arg for arg in argv)


def test_an_external_api_gets_no_secret_in_the_atroposlib_settings(tmp_path: Path) -> None:
    from hermes_nb.config import EnvironmentRef, InfraConfig, RunConfig
    from hermes_nb.frameworks.atroposlib import serve

    config = RunConfig(
        environment=EnvironmentRef(name="add", class_name="AddEnv", file="/envs/add.py", framework="atroposlib"),
        env={"group_size": 4, "batch_size": 16, "total_steps": 6},
        infra=InfraConfig(api_url="http://127.0.0.1:4100", inference_url="http://127.0.0.1:4200"),
    )

    settings = serve.serve_settings(config, SECRET, api_secret=None)

    assert settings["env"]["rollout_server_url"] == "http://127.0.0.1:4100"


def test_the_secret_never_reaches_a_servers_argv(api_url: str) -> None:
    port = api_url.rsplit(":", 1)[1]
    listing = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    ours = [line for line in listing.splitlines() if "hermes_nb.trajectory_api" in line and port in line]

    assert ours and not any(SECRET in line for line in ours)


def test_the_atroposlib_bridge_hides_the_secret_from_the_config_atroposlib_gives_wandb(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import wandb

    from hermes_nb.frameworks.atroposlib.bridge import hide_secret_from_wandb

    given: list[object] = []
    monkeypatch.setattr(wandb, "init", lambda *args, **kwargs: given.append(kwargs["config"]))
    monkeypatch.setenv(SECRET_ENV, SECRET)

    hide_secret_from_wandb()
    wandb.init(config={"rollout_server_url": f"http://127.0.0.1:4100/{SECRET}", "group_size": 4})

    assert given == [{"rollout_server_url": "http://127.0.0.1:4100/***", "group_size": 4}]


@pytest.mark.parametrize(("external", "api_gets_it"), [(None, True), ("http://127.0.0.1:8000", False)])
def test_run_children_get_the_secret_in_their_environment_and_an_external_api_never_does(
    monkeypatch: pytest.MonkeyPatch, external: str | None, api_gets_it: bool
) -> None:
    from hermes_nb.config import RunConfig
    from hermes_nb.protocol.auth import API_SECRET_ENV
    from hermes_nb.protocol.run_state import RunState
    from hermes_nb.runs.supervision.supervisor import Supervisor

    monkeypatch.setenv(API_SECRET_ENV, "inherited-from-elsewhere")
    config = RunConfig.model_validate({"trainer": {"external_api_url": external}})
    state = RunState(run_id="r1", environment="arithmetic", total_steps=1)
    supervisor = Supervisor(paths=run_paths("r1"), config=config, state=state, secret=SECRET)

    env = supervisor.environment_for("trainer")

    assert env[SECRET_ENV] == SECRET
    assert env.get(API_SECRET_ENV) == (SECRET if api_gets_it else None)


def test_an_access_log_line_of_a_capability_url_shows_no_secret() -> None:
    import logging

    from hermes_nb.protocol.auth import HideSecret

    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, "", 0, '%s "%s %s"', ("127.0.0.1", "GET", f"/{SECRET}/status"), None
    )

    HideSecret(SECRET).filter(record)

    assert record.getMessage() == '127.0.0.1 "GET /***/status"'
