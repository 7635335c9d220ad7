"""The environment host against the real trajectory API (a subprocess) and a fake inference server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from env_host_fakes import (
    EOS,
    REPO_ROOT,
    FakeInferenceState,
    fake_inference_server,
    trajectory_api_process,
    write_tiny_env,
)

from hermes_nb.config import InfraConfig, RunConfig, WandbConfig
from hermes_nb.env.base import BaseEnv
from hermes_nb.env_host import loop as runtime
from hermes_nb.env_host.env_config import build_env_config
from hermes_nb.env_host.loading import load_env_class, make_env
from hermes_nb.errors import ConfigError, EnvironmentLoadError
from hermes_nb.metrics.reader import read_all_metrics
from hermes_nb.protocol.trajectory import MASK_IGNORE, PROMPT_LOGPROB, Registration, ScoredDataGroup
from hermes_nb.trajectory_api.client import TrajectoryClient

BATCH = 4
GROUP = 2


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # One API process for the module (starting one costs seconds on a busy machine); each test resets it.
    with trajectory_api_process(tmp_path_factory.mktemp("api") / "api.log") as url:
        yield url


@pytest.fixture
def servers(api_url: str) -> Iterator[tuple[str, str, FakeInferenceState]]:
    httpx.get(api_url + "/reset_data", timeout=10).raise_for_status()
    with fake_inference_server() as (inf_url, state):
        yield api_url, inf_url, state


def run_config(tmp_path: Path, api_url: str, inference_url: str, **env: object) -> RunConfig:
    infra = InfraConfig(run_id="t1", run_dir=str(tmp_path), api_url=api_url, inference_url=inference_url)
    values = {"group_size": GROUP, "batch_size": BATCH, "max_num_workers": 2, "steps_per_eval": 2, **env}
    return RunConfig(env=values, infra=infra, wandb=WandbConfig(mode="disabled"))


def tiny_env(tmp_path: Path, config: RunConfig) -> BaseEnv:
    return make_env(load_env_class(str(write_tiny_env(tmp_path))), config)


async def register_trainer(api: TrajectoryClient, num_steps: int) -> None:
    await api.register(Registration(batch_size=BATCH, max_token_len=64, num_steps=num_steps))


async def train(api: TrajectoryClient, steps: int, seen: list[ScoredDataGroup], step_s: float = 0.0) -> None:
    """Play the trainer: take ``steps`` batches as they become available, each "step" taking ``step_s``."""
    taken = 0
    while taken < steps:
        batch = await api.batch()
        if batch:
            seen.extend(batch)
            taken += 1
            await asyncio.sleep(step_s)
        else:
            await asyncio.sleep(0.05)


async def serve_alongside_trainer(
    env: BaseEnv, config: RunConfig, steps: int, step_s: float = 0.0
) -> tuple[object, list]:  # type: ignore[type-arg]
    seen: list[ScoredDataGroup] = []
    async with TrajectoryClient(config.infra.api_url or "") as api:
        await register_trainer(api, steps)
        serving = asyncio.create_task(runtime.serve(env, config, handle_signals=False))
        await asyncio.wait_for(train(api, steps, seen, step_s), 30)
        outcome = await asyncio.wait_for(serving, 30)
    return outcome, seen


def test_groups_reach_the_api_with_aligned_masks_and_logprobs(tmp_path: Path, servers: tuple) -> None:  # type: ignore[type-arg]
    api_url, inf_url, _ = servers
    config = run_config(tmp_path, api_url, inf_url)
    outcome, seen = asyncio.run(serve_alongside_trainer(tiny_env(tmp_path, config), config, steps=2))

    assert outcome.status == "completed" and outcome.exit_code == 0  # type: ignore[attr-defined]
    assert len(seen) == 2 * BATCH // GROUP
    for group in seen:
        assert group.scores in ([1.0, 0.0],)  # choice 0 says "0" (correct), choice 1 says "1"
        assert group.env_id == 0
        for tokens, masks, logprobs in zip(group.tokens, group.masks, group.inference_logprobs or [], strict=True):
            prompt_len = len(tokens) - 2  # one answer character and EOS
            assert masks[:prompt_len] == [MASK_IGNORE] * prompt_len
            assert masks[prompt_len:] == tokens[prompt_len:] and tokens[-1] == EOS
            assert logprobs[:prompt_len] == [PROMPT_LOGPROB] * prompt_len
            assert logprobs[prompt_len:] == pytest.approx([-0.1, -0.2])


def test_stops_at_total_steps_with_metrics_and_evals_logged(tmp_path: Path, servers: tuple) -> None:  # type: ignore[type-arg]
    api_url, inf_url, _ = servers
    config = run_config(tmp_path, api_url, inf_url)
    # Steps slower than the environment's status poll, so it sees every step, as with a real trainer.
    step_s = 2 * runtime.POLL_S
    outcome, _ = asyncio.run(serve_alongside_trainer(tiny_env(tmp_path, config), config, steps=4, step_s=step_s))

    assert outcome.step == 4  # type: ignore[attr-defined]
    rows = read_all_metrics(tmp_path / "env_metrics.jsonl")
    evals = [r.step for r in rows if "eval/percent_correct" in r.values]
    assert evals[0] == 0 and evals[-1] == 4 and 2 in evals  # before training, every 2 steps, at the end
    assert all(r.values["eval/percent_correct"] == 1.0 for r in rows if "eval/percent_correct" in r.values)
    sampled_rows = [r for r in rows if "env/reward_mean" in r.values]
    assert sampled_rows
    assert all(r.values["env/reward_mean"] == r.values["env/percent_correct"] == 0.5 for r in sampled_rows)
    assert not any(key.startswith("train/") for r in rows for key in r.values)  # the trainer's keys
    assert sum(r.values.get("env/groups_posted", 0) for r in rows) >= 4 * BATCH // GROUP


def test_groups_dropped_for_equal_scores_still_count_in_the_environments_reward_and_percent_correct(
    tmp_path: Path,
    servers: tuple,  # type: ignore[type-arg]
) -> None:
    api_url, inf_url, _ = servers
    config = run_config(tmp_path, api_url, inf_url)
    tiny = load_env_class(str(write_tiny_env(tmp_path)))

    class HalfDropped(tiny):  # type: ignore[valid-type,misc]
        async def collect_trajectories(self, item):  # type: ignore[no-untyped-def]
            if item.metadata["n"] % 2:
                return await super().collect_trajectories(item)  # scores [1.0, 0.0]: sent
            completions = await self.server.sample(item.prompt, n=self.config.group_size, max_tokens=4)
            return self.scored_group(completions, [0.0] * len(completions)), []  # equal scores: dropped

    outcome, seen = asyncio.run(
        serve_alongside_trainer(make_env(HalfDropped, config), config, steps=3, step_s=2 * runtime.POLL_S)
    )

    assert outcome.step == 3  # type: ignore[attr-defined]
    assert all(group.scores == [1.0, 0.0] for group in seen)  # the trainer saw only the sent groups
    rows = [r.values for r in read_all_metrics(tmp_path / "env_metrics.jsonl") if "env/reward_mean" in r.values]
    assert rows and all(values["env/reward_mean"] == values["env/percent_correct"] for values in rows)
    assert any(values["env/reward_mean"] < 0.5 for values in rows)  # the sent groups alone would read 0.5


def test_back_pressure_pauses_sampling_until_the_trainer_takes_a_batch(tmp_path: Path, servers: tuple) -> None:  # type: ignore[type-arg]
    api_url, inf_url, state = servers
    config = run_config(tmp_path, api_url, inf_url, max_batches_offpolicy=1, steps_per_eval=0)
    env = tiny_env(tmp_path, config)

    async def scenario() -> tuple[int, int, int, int]:
        async with TrajectoryClient(api_url) as api:
            await register_trainer(api, 10)
            stop = asyncio.Event()
            serving = asyncio.create_task(runtime.serve(env, config, stop=stop, handle_signals=False))
            await _until(lambda: state.completion_requests >= 3)  # baseline eval (1) + a full queue (2)
            await asyncio.sleep(1.0)
            paused_at = state.completion_requests
            queued = (await api.status()).queue_size
            await asyncio.sleep(1.0)
            still = state.completion_requests
            assert await api.batch()
            await _until(lambda: state.completion_requests > still)
            stop.set()
            outcome = await asyncio.wait_for(serving, 10)
            return paused_at, still, queued, outcome.exit_code

    paused_at, still, queued, exit_code = asyncio.run(scenario())
    assert queued == BATCH // GROUP  # max_batches_offpolicy=1: one batch of sequences, no more
    assert still == paused_at  # nothing sampled while the queue was full
    assert exit_code == 0


def test_worker_exceptions_skip_the_group_and_the_run_goes_on(
    tmp_path: Path,
    servers: tuple,  # type: ignore[type-arg]
    caplog: pytest.LogCaptureFixture,
) -> None:
    api_url, inf_url, _ = servers
    config = run_config(tmp_path, api_url, inf_url, fail_every=3, steps_per_eval=0)
    outcome, _ = asyncio.run(serve_alongside_trainer(tiny_env(tmp_path, config), config, steps=3))

    assert outcome.status == "completed"  # type: ignore[attr-defined]
    assert "tiny env broke on item 3" in caplog.text and "Traceback" in caplog.text
    failed = sum(r.values.get("env/failed_groups", 0) for r in read_all_metrics(tmp_path / "env_metrics.jsonl"))
    assert failed >= 1


def test_repeated_failures_end_serve_with_a_failure_and_tear_the_environment_down(
    tmp_path: Path,
    servers: tuple,  # type: ignore[type-arg]
) -> None:
    api_url, inf_url, _ = servers
    config = run_config(tmp_path, api_url, inf_url, fail_always=True, steps_per_eval=0, max_num_workers=4)
    env = tiny_env(tmp_path, config)

    async def scenario() -> runtime.ServeOutcome:
        async with TrajectoryClient(api_url) as api:
            await register_trainer(api, 10)
            return await asyncio.wait_for(runtime.serve(env, config, handle_signals=False), 30)

    outcome = asyncio.run(scenario())
    assert outcome.status == "failed" and outcome.exit_code == 1
    assert "20 groups failed in a row" in (outcome.error or "")
    assert "tiny env broke" in (outcome.error or "")
    assert getattr(env, "torn_down", False)  # its teardown hook ran (what setup holds is released)


def test_serve_cli_disconnects_and_exits_0_on_sigterm(tmp_path: Path, servers: tuple) -> None:  # type: ignore[type-arg]
    api_url, inf_url, _ = servers
    config = run_config(tmp_path, api_url, inf_url)
    config.save(tmp_path / "config.yaml")
    env_file = write_tiny_env(tmp_path)

    async def register() -> None:
        async with TrajectoryClient(api_url) as api:
            await register_trainer(api, 10)

    asyncio.run(register())
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hermes_nb.env_host",
            "serve",
            str(env_file),
            "--config",
            str(tmp_path / "config.yaml"),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    try:
        asyncio.run(_until_async(lambda: _num_envs(api_url), timeout=20))
        registered_after = time.monotonic() - started
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = out.decode()
    assert proc.returncode == 0, log
    assert "disconnected from the trajectory API" in log
    assert registered_after < 15, log


def test_process_cli_writes_n_groups_with_decoded_text(tmp_path: Path) -> None:
    env_file = write_tiny_env(tmp_path)
    output = tmp_path / "groups.jsonl"
    with fake_inference_server() as (inf_url, _):
        result = subprocess.run(
            [sys.executable, "-m", "hermes_nb.env_host", "process", f"{env_file}:TinyEnv", "--num-groups", "3",
             "--output", str(output), "--inference-url", inf_url],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["groups"] == 3 and summary["completions"] == 3 * 16  # the config default group_size
    assert summary["accuracy"] == 0.5
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(lines) == 3
    first = lines[0]
    assert first["item"]["prompt"] == "q1="
    assert [s["completion"] for s in first["samples"][:2]] == ["0", "1"]
    assert all(s["prompt"] == "q1=" for s in first["samples"])
    ScoredDataGroup.model_validate(first["group"])


def test_an_environment_file_run_as_a_script_serves_its_own_class(tmp_path: Path) -> None:
    # ``python my_env.py process ...``: BaseEnv.cli() takes the class it is called on, no file argument.
    env_file = tmp_path / "script_env.py"
    env_file.write_text(write_tiny_env(tmp_path).read_text() + '\n\nif __name__ == "__main__":\n    TinyEnv.cli()\n')
    output = tmp_path / "groups.jsonl"
    with fake_inference_server() as (inf_url, _):
        result = subprocess.run(
            [sys.executable, str(env_file), "process", "--num-groups", "2", "--output", str(output),
             "--inference-url", inf_url],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["groups"] == 2
    assert len(output.read_text().splitlines()) == 2


def test_the_module_cli_reports_a_missing_environment_file_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing.py"
    result = subprocess.run(
        [sys.executable, "-m", "hermes_nb.env_host", "evaluate", f"{missing}:Nope"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == f"error: environment file {missing} does not exist"


def test_evaluate_once_runs_the_environments_evaluation(tmp_path: Path) -> None:
    with fake_inference_server() as (inf_url, _):
        config = RunConfig(infra=InfraConfig(inference_url=inf_url))
        env = tiny_env(tmp_path, config)

        async def evaluate() -> dict[str, float]:
            try:
                return await runtime.evaluate_once(env)
            finally:
                await env.server.aclose()

        assert asyncio.run(evaluate()) == {"eval/percent_correct": 1.0}


# ---- loading and config ------------------------------------------------------------------------------------
def test_env_config_overlays_run_values_and_locks_infrastructure(tmp_path: Path) -> None:
    cls = load_env_class(str(write_tiny_env(tmp_path)))
    infra = InfraConfig(api_url="http://127.0.0.1:1234", inference_url="http://127.0.0.1:5678")
    config = RunConfig(env={"group_size": 4, "rollout_server_url": "http://elsewhere:1"}, infra=infra)
    env_config, servers = build_env_config(cls, config)
    assert env_config.group_size == 4
    assert env_config.rollout_server_url == "http://127.0.0.1:1234"
    assert env_config.tokenizer_name == "embedded"
    assert servers[0].base_url == "http://127.0.0.1:5678/v1"


def test_invalid_env_value_names_the_field(tmp_path: Path) -> None:
    cls = load_env_class(str(write_tiny_env(tmp_path)))
    with pytest.raises(ConfigError, match="group_size"):
        build_env_config(cls, RunConfig(env={"group_size": 1}))
    with pytest.raises(ConfigError, match="no_such_field"):
        build_env_config(cls, RunConfig(env={"no_such_field": 1}))


def test_loading_names_what_is_wrong(tmp_path: Path) -> None:
    env_file = write_tiny_env(tmp_path)
    with pytest.raises(EnvironmentLoadError, match=r"no BaseEnv subclass named Nope \(found: TinyEnv\)"):
        load_env_class(f"{env_file}:Nope")
    with pytest.raises(EnvironmentLoadError, match="does not exist"):
        load_env_class(str(tmp_path / "missing.py"))
    broken = tmp_path / "broken.py"
    broken.write_text("raise ImportError('no such dependency')\n")
    with pytest.raises(EnvironmentLoadError, match="no such dependency"):
        load_env_class(str(broken))
    two = tmp_path / "two.py"
    two.write_text(env_file.read_text() + "\n\nclass OtherEnv(TinyEnv):\n    pass\n")
    with pytest.raises(EnvironmentLoadError, match="OtherEnv, TinyEnv"):
        load_env_class(str(two))
    assert load_env_class(f"{two}:OtherEnv").__name__ == "OtherEnv"


def test_env_process_starts_without_torch_or_transformers() -> None:
    code = (
        "import sys, hermes_nb.env_host.cli, hermes_nb.env_host.loop;"
        "print([m for m in ('torch', 'transformers', 'wandb', 'fastapi') if m in sys.modules])"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# ---- helpers -----------------------------------------------------------------------------------------------
async def _until(condition: object, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


async def _until_async(condition: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.1)


async def _num_envs(api_url: str) -> bool:
    async with TrajectoryClient(api_url) as api:
        health = await api.health()
    return bool(health.num_envs)  # type: ignore[attr-defined]


class CountingTransport(httpx.AsyncHTTPTransport):
    """A real transport that remembers the path of every request it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        return await super().handle_async_request(request)


def test_groups_finished_together_reach_the_api_in_one_request(api_url: str) -> None:
    from hermes_nb.env_host.trajectory_link import TrajectoryLink
    from hermes_nb.protocol.trajectory import RegisterEnv

    httpx.get(api_url + "/reset_data", timeout=10).raise_for_status()
    groups = [
        ScoredDataGroup(
            tokens=[[5, 6, k], [5, 6, 9]], masks=[[MASK_IGNORE, 6, k], [MASK_IGNORE, 6, 9]], scores=[1.0, 0.0]
        )
        for k in range(10, 14)
    ]

    async def post_together() -> tuple[list[str], list[ScoredDataGroup] | None]:
        transport = CountingTransport()
        async with TrajectoryClient(api_url) as api:
            await register_trainer(api, num_steps=10)
            link = TrajectoryLink(api_url, transport=transport)
            await link.register(RegisterEnv(max_token_length=64, desired_name="t", group_size=GROUP))
            await asyncio.gather(*(link.post_group(g) for g in groups))
            await link.aclose()
            return transport.paths, await api.batch()

    paths, batch = asyncio.run(post_together())
    assert paths == ["/register-env", "/scored_data_list"]
    assert batch is not None and [g.tokens[0][2] for g in batch] == [10, 11]  # a batch is BATCH = 4 sequences
