"""rl_test_inference: the selected environment in process mode against each model, with real processes.

Local models are served by real temporary inference servers (``python -m hermes_nb.processes.inference_server``);
endpoints are a fake OpenAI-compatible server on loopback (deterministic: half of each group answers "0") or a
closed port.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from env_host_fakes import fake_inference_server, write_tiny_env

from hermes_nb import api
from hermes_nb.config import RunConfig
from hermes_nb.errors import NoEnvironmentSelectedError
from hermes_nb.inference.local import SERVER_MODULE
from hermes_nb.model_test.runner import InferenceTestError, InferenceTestResult, rl_test_inference
from hermes_nb.model_test.targets import KEY_ENV_VAR, ModelReferenceError, resolve_targets
from hermes_nb.system import home
from hermes_nb.system.net import free_port
from hermes_nb.testing import make_tiny_model

pytestmark = pytest.mark.timeout(240)

BROKEN_ENV = '''
"""An environment whose every group raises."""
from hermes_nb.env import BaseEnv, QAItem


class BrokenEnv(BaseEnv):
    name = "broken"

    async def get_next_item(self):
        return QAItem(prompt="1+1=", answer="2")

    async def collect_trajectories(self, item):
        raise RuntimeError("broken on purpose")
'''


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


_EARLIER_CHILDREN: set[int] = set()


@pytest.fixture(autouse=True)
def _note_earlier_children() -> None:
    # Processes an earlier test in this interpreter left running by design (W&B's service lives as long as the
    # process that started it) are not this test's: only children started since the test began count.
    _EARLIER_CHILDREN.clear()
    _EARLIER_CHILDREN.update(p.pid for p in psutil.Process().children(recursive=True))


def _children() -> list[psutil.Process]:
    """The live processes this test started (directly or not) that are still running."""
    return [p for p in psutil.Process().children(recursive=True) if p.pid not in _EARLIER_CHILDREN and _alive(p)]


def _command(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.NoSuchProcess:
        return ""


def _closed_endpoint() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: free_port closed it again


def _select(name: str, directory: Path | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if directory is not None:
        monkeypatch.setenv("HERMES_NB_ENV_PATH", str(directory))
    asyncio.run(api.rl_select_environment(name))


@pytest.fixture
def tiny_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "envs"
    directory.mkdir()
    write_tiny_env(directory)
    _select("tiny", directory, monkeypatch)


@pytest.fixture
def broken_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "envs"
    directory.mkdir()
    (directory / "broken_env.py").write_text(BROKEN_ENV, encoding="utf-8")
    _select("broken", directory, monkeypatch)


@pytest.fixture
def fake_endpoint() -> Iterator[tuple[str, object]]:
    with fake_inference_server() as (url, state):
        yield url + "/v1", state


def _scores(path: str | None) -> list[list[float]]:
    assert path is not None
    return [json.loads(line)["scores"] for line in Path(path).read_text(encoding="utf-8").splitlines()]


# ---- real local models ------------------------------------------------------------------------------------


def test_local_models_run_concurrently_and_an_unreachable_endpoint_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _select("arithmetic", None, monkeypatch)
    second = make_tiny_model(tmp_path / "second")
    closed = _closed_endpoint()
    started = time.monotonic()
    result = asyncio.run(rl_test_inference(num_steps=2, group_size=4, models=["embedded", str(second), closed]))
    elapsed = time.monotonic() - started
    base, other, endpoint = result.results
    assert [r.status for r in result.results] == ["ok", "ok", "endpoint_failed"], str(result)
    for local in (base, other):
        scores = _scores(local.output_file)
        assert (local.steps, local.completions, local.step_success_rate) == (2, 8, 1.0)
        assert local.correct == sum(s >= 1.0 for group in scores for s in group)
        assert local.accuracy == local.correct / 8
        assert local.error is None
    assert "unreachable" in (endpoint.error or "") and endpoint.steps == 0
    # Concurrent: the whole call took less than the two local models one after the other.
    assert elapsed < base.seconds + other.seconds
    summary = result.to_dict()["summary"]
    assert (summary["models_tested"], summary["models_succeeded"], summary["environment_working"]) == (3, 2, True)
    assert summary["best_model"] in ("embedded", str(second))
    assert result.to_dict()["total_models"] == 3 and result.to_dict()["successful_models"] == 2
    assert _children() == []


def test_broken_environment_is_reported_per_model_and_does_not_work(
    broken_env: None, fake_endpoint: tuple[str, object]
) -> None:
    url, _state = fake_endpoint
    # Two models on one fake endpoint (a local server would add half a minute and nothing this test needs).
    result = asyncio.run(rl_test_inference(num_steps=2, group_size=4, models=[url + "#a", url + "#b"]))
    assert [r.status for r in result.results] == ["no_groups", "no_groups"]
    for model in result.results:
        assert model.steps == 0 and model.step_success_rate == 0.0
        assert "broken on purpose" in (model.error or "")
    assert result.environment_works is False
    assert result.to_dict()["summary"]["environment_working"] is False
    assert "does NOT work" in str(result)
    assert _children() == []


def test_cancelling_mid_test_stops_the_server_and_the_environment(tiny_env: None) -> None:
    async def cancel_once_the_environment_runs() -> dict[psutil.Process, str]:
        # Default models: the base model. Many steps, so that it is still running when cancelled.
        task = asyncio.create_task(rl_test_inference(num_steps=500, group_size=4))
        deadline = time.monotonic() + 120
        running: dict[psutil.Process, str] = {}
        while time.monotonic() < deadline and not any("hermes_nb.env" in c for c in running.values()):
            await asyncio.sleep(0.1)
            running = {p: _command(p) for p in _children()}
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return running

    running = asyncio.run(cancel_once_the_environment_runs())
    commands = list(running.values())
    assert any(SERVER_MODULE in c for c in commands) and any("hermes_nb.env" in c for c in commands)
    assert not any(_alive(p) for p in running)
    assert _children() == []


def test_a_model_over_its_timeout_is_reported_as_timed_out_and_its_server_stopped(tiny_env: None) -> None:
    # A server cannot even import torch in half a second: the timeout hits while it is starting.
    result = asyncio.run(rl_test_inference(num_steps=1, group_size=2, timeout_s=0.5))
    [model] = result.results
    assert (model.status, model.steps) == ("timed_out", 0)
    assert "timeout_s=0.5" in (model.error or "")
    assert _children() == []


def test_a_local_model_is_served_on_the_runs_trainer_device(tiny_env: None) -> None:
    asyncio.run(api.rl_edit_config("trainer.device", "cuda:7"))  # no such device here: its server says so
    result = asyncio.run(rl_test_inference(num_steps=1, group_size=2))
    [model] = result.results
    assert model.status == "server_failed" and "cuda:7" in (model.error or ""), model.error
    assert _children() == []


# ---- endpoints (a fake server in this process) ------------------------------------------------------------


def test_endpoint_is_scored_with_its_model_name_and_key_from_the_named_variable(
    tiny_env: None, fake_endpoint: tuple[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, state = fake_endpoint
    secret = "sk-test-not-for-logs-1234"
    monkeypatch.setenv(KEY_ENV_VAR, "MY_ENDPOINT_KEY")
    monkeypatch.setenv("MY_ENDPOINT_KEY", secret)
    result = asyncio.run(rl_test_inference(num_steps=3, group_size=4, models=[url + "#some/model"]))
    [model] = result.results
    # The fake answers "0" (correct) for even choices and "1" for odd ones: exactly half is correct.
    assert (model.status, model.steps, model.completions, model.correct, model.accuracy) == ("ok", 3, 12, 6, 0.5)
    assert set(state.authorization) == {f"Bearer {secret}"}  # type: ignore[attr-defined]
    files = [p for p in Path(result.output_dir).iterdir() if p.is_file()]
    assert {p.suffix for p in files} >= {".jsonl", ".log", ".yaml", ".json"}
    assert not any(secret in p.read_text(encoding="utf-8") for p in files)


def test_missing_key_fails_that_endpoint_before_anything_is_sent(tiny_env: None) -> None:
    result = asyncio.run(rl_test_inference(num_steps=1, group_size=2, models=["https://openrouter.ai/api/v1#q/m"]))
    [model] = result.results
    assert model.status == "endpoint_failed"
    assert "OPENROUTER_API_KEY is not set" in (model.error or "")
    assert not Path(model.output_file or "").exists()


# ---- arguments refused before anything starts -------------------------------------------------------------


def test_unknown_model_reference_is_refused_and_nothing_is_written(tiny_env: None) -> None:
    with pytest.raises(ModelReferenceError, match="no-such-run"):
        asyncio.run(rl_test_inference(models=["no-such-run"]))
    assert not (home.home_dir() / "inference_tests").exists()


@pytest.mark.parametrize(("kwargs", "field"), [({"num_steps": 0}, "num_steps"), ({"group_size": 1}, "group_size")])
def test_impossible_arguments_name_the_argument(tiny_env: None, kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(InferenceTestError, match=field):
        asyncio.run(rl_test_inference(**kwargs))


def test_without_a_selected_environment_it_says_to_select_one() -> None:
    with pytest.raises(NoEnvironmentSelectedError):
        asyncio.run(rl_test_inference())


def test_targets_default_to_the_base_model_and_parse_endpoints() -> None:
    [base] = resolve_targets(None, RunConfig())
    assert (base.kind, Path(base.location)) == ("local", home.embedded_base_model_dir())
    [router] = resolve_targets(["https://openrouter.ai/api/v1#qwen/qwen3-8b"], RunConfig())
    assert (router.kind, router.location, router.model_name) == (
        "endpoint",
        "https://openrouter.ai/api/v1",
        "qwen/qwen3-8b",
    )
    assert router.api_key_env == "OPENROUTER_API_KEY"


def test_result_keeps_the_original_tool_keys() -> None:
    result = InferenceTestResult(environment="e", environment_file="f", num_steps=3, group_size=16, output_dir="d")
    data = result.to_dict()
    assert set(data) >= {"environment", "environment_file", "test_config", "models_tested", "summary"}
    assert set(data["summary"]) >= {"models_tested", "models_succeeded", "best_model", "avg_accuracy"}


def test_inference_server_refuses_a_non_loopback_host(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")
    argv = [sys.executable, "-m", SERVER_MODULE, "--model", str(model), "--port", "1", "--host", "0.0.0.0"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "loopback" in done.stderr
