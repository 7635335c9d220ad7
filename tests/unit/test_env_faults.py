"""An environment's faults during a run: each is counted, logged with its item, skipped; a streak ends the run.

Against the real trajectory API (a subprocess) and a fake inference server, with an environment
(tests/fixtures/faults/fault_env.py) whose every ``fault_every``-th item goes wrong in the way ``fault`` names.
The trajectory API's own refusal of such groups is checked in-process.
"""

from __future__ import annotations

import asyncio
import logging
import math
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from env_host_fakes import REPO_ROOT, fake_inference_server, trajectory_api_process

from hermes_nb.config import InfraConfig, RunConfig, WandbConfig
from hermes_nb.env_host import loop as runtime
from hermes_nb.env_host.loading import load_env_class, make_env
from hermes_nb.metrics.reader import read_all_metrics
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.protocol.trajectory import Registration, ScoredDataGroup
from hermes_nb.runs.table.status import check_status
from hermes_nb.system.home import run_paths
from hermes_nb.trajectory_api.client import TrajectoryClient
from hermes_nb.trajectory_api.server import create_app

BATCH = 4
GROUP = 2
# Above every token id of the fake inference server (characters of "q12=", "0", "1" and EOS).
VOCAB = 128
RUN_ID = "20250101-120000-faultyenvs"

FAULT_ENV = REPO_ROOT / "tests" / "fixtures" / "faults" / "fault_env.py"


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with trajectory_api_process(tmp_path_factory.mktemp("api") / "api.log") as url:
        yield url


@pytest.fixture
def servers(api_url: str) -> Iterator[tuple[str, str]]:
    httpx.get(api_url + "/reset_data", timeout=10).raise_for_status()
    with fake_inference_server() as (inf_url, _):
        yield api_url, inf_url


def fault_config(run_dir: Path, servers: tuple[str, str], fault: str, **env: object) -> RunConfig:
    api_url, inf_url = servers
    infra = InfraConfig(run_id=RUN_ID, run_dir=str(run_dir), api_url=api_url, inference_url=inf_url)
    values = {"group_size": GROUP, "batch_size": BATCH, "max_num_workers": 2, "steps_per_eval": 0, "fault": fault}
    return RunConfig(env={**values, **env}, infra=infra, wandb=WandbConfig(mode="disabled"))


async def register_trainer(api_url: str, steps: int) -> None:
    async with TrajectoryClient(api_url) as api:
        await api.register(Registration(batch_size=BATCH, max_token_len=64, num_steps=steps, vocab_size=VOCAB))


async def serve_and_train(config: RunConfig, steps: int) -> runtime.ServeOutcome:
    """The environment in-process beside a trainer that takes ``steps`` batches (none when ``steps`` is 0)."""
    env = make_env(load_env_class(str(FAULT_ENV)), config)
    api_url = config.infra.api_url or ""
    await register_trainer(api_url, steps or 10)  # 0: no trainer steps, the environment must end by itself
    serving = asyncio.create_task(runtime.serve(env, config, handle_signals=False))
    async with TrajectoryClient(api_url) as api:
        taken = 0
        while taken < steps and not serving.done():
            if await api.batch():
                taken += 1
            else:
                await asyncio.sleep(0.05)
    return await asyncio.wait_for(serving, 30)


def total(run_dir: Path, key: str) -> float:
    return sum(row.values.get(key, 0.0) for row in read_all_metrics(run_dir / "env_metrics.jsonl"))


# ---- in-process: each fault is skipped and counted, the run goes on ---------------------------------------------


@pytest.mark.parametrize(
    ("fault", "logged"),
    [
        ("shorter_masks", "masks[0]: has 4 values, tokens[0] has 5"),
        ("nan_score", "scores[0]: nan is not a finite number"),
        ("text_score", "scores[0]: Input should be a valid number"),
        ("out_of_vocab", f"token id 10000 is out of the trained model's vocabulary (ids are in [0, {VOCAB}))"),
        ("untrained", "masks: every value is -100 (not trained on); the group would train nothing"),
        ("not_a_tuple", "FaultEnv.collect_trajectories returned None; expected (group or None, backlog list)"),
        ("raise", "RuntimeError: broke on item 2"),
    ],
)
def test_a_faulty_group_is_skipped_counted_and_logged_with_its_item(
    tmp_path: Path, servers: tuple[str, str], caplog: pytest.LogCaptureFixture, fault: str, logged: str
) -> None:
    caplog.set_level(logging.INFO, logger="hermes_nb.env_host")
    outcome = asyncio.run(serve_and_train(fault_config(tmp_path, servers, fault), steps=2))

    assert outcome.status == "completed", outcome.error
    assert total(tmp_path, keys.ENV_GROUPS_FAILED) >= 1
    assert total(tmp_path, keys.ENV_TIMEOUTS) == 0
    skipped = [r.getMessage() for r in caplog.records if "group skipped" in r.getMessage()]
    assert skipped and logged in skipped[0] and "q2=" in skipped[0], skipped  # item 2 is the first faulty one


def test_a_call_that_never_returns_times_out_and_the_run_goes_on(
    tmp_path: Path, servers: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    config = fault_config(tmp_path, servers, "hang", worker_timeout=0.5)
    outcome = asyncio.run(serve_and_train(config, steps=2))

    assert outcome.status == "completed", outcome.error
    assert total(tmp_path, keys.ENV_TIMEOUTS) >= 1
    assert total(tmp_path, keys.ENV_GROUPS_FAILED) == 0
    assert "collect_trajectories did not return within 0.5 s (env.worker_timeout)" in caplog.text
    assert "q2=" in caplog.text


def test_a_streak_of_faults_fails_the_run_naming_the_environments_error(
    tmp_path: Path, servers: tuple[str, str]
) -> None:
    config = fault_config(tmp_path, servers, "raise", fault_every=1, max_consecutive_failures=3)
    outcome = asyncio.run(serve_and_train(config, steps=0))

    assert outcome.status == "failed" and outcome.exit_code == 1
    assert "FaultEnv: 3 groups failed in a row" in (outcome.error or "")
    assert "(last: RuntimeError: broke on item" in (outcome.error or "")
    assert "env.max_consecutive_failures = 3" in (outcome.error or "")
    assert total(tmp_path, keys.ENV_GROUPS_FAILED) >= 3  # the fault rows reach env_metrics.jsonl


def test_an_environment_that_is_gone_fails_the_run_at_its_first_fault_not_after_a_streak(
    tmp_path: Path, servers: tuple[str, str]
) -> None:
    config = fault_config(tmp_path, servers, "gone", fault_every=2, max_consecutive_failures=20)
    outcome = asyncio.run(serve_and_train(config, steps=0))

    assert outcome.status == "failed" and outcome.exit_code == 1
    assert outcome.error == "FaultEnv: the server this environment needs died at item 2"
    assert total(tmp_path, keys.ENV_GROUPS_FAILED) == 1


def test_timeouts_count_towards_the_streak(tmp_path: Path, servers: tuple[str, str]) -> None:
    config = fault_config(tmp_path, servers, "hang", fault_every=1, worker_timeout=0.2, max_consecutive_failures=2)
    outcome = asyncio.run(serve_and_train(config, steps=0))

    assert outcome.status == "failed"
    assert "2 groups failed in a row (last: CollectTimeout:" in (outcome.error or "")


# ---- real environment processes: the run fails with the cause last in the log, and status shows it -------------


def run_env_process(config: RunConfig, timeout_s: float) -> tuple[int, RunPaths]:
    """``python -m hermes_nb.env_host serve`` as a run starts it, its output in the run's env log."""
    paths = run_paths(RUN_ID)
    paths.run_dir.mkdir(parents=True, exist_ok=True)
    paths.logs["env"].parent.mkdir(parents=True, exist_ok=True)
    config = config.model_copy(update={"infra": config.infra.model_copy(update={"run_dir": str(paths.run_dir)})})
    config.save(paths.run_dir / "config.yaml")
    asyncio.run(register_trainer(config.infra.api_url or "", 10))
    argv = [sys.executable, "-m", "hermes_nb.env_host", "serve", str(FAULT_ENV)]
    with paths.logs["env"].open("wb") as log:
        proc = subprocess.Popen(
            [*argv, "--config", str(paths.run_dir / "config.yaml")], cwd=REPO_ROOT, stdout=log, stderr=log
        )
        try:
            return proc.wait(timeout_s), paths
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def failed_env_status(paths: RunPaths) -> Any:
    from run_dirs import write_state

    write_state(RUN_ID, "failed", failed_process="env", error="env exited with code 1 while the run was going on")
    return check_status(RUN_ID)


def test_an_environment_process_that_keeps_failing_exits_1_and_status_shows_why(
    tmp_path: Path, servers: tuple[str, str]
) -> None:
    config = fault_config(tmp_path, servers, "raise", fault_every=1, max_consecutive_failures=3)
    code, paths = run_env_process(config, timeout_s=60)

    log = paths.logs["env"].read_text()
    assert code == 1, log
    status = failed_env_status(paths)
    assert status.env_failed_groups >= 3
    cause = [line for line in status.log_tail if "environment failed: FaultEnv: 3 groups failed in a row" in line]
    assert cause and "RuntimeError: broke on item" in cause[0], status.log_tail
    assert "environment faults: " in str(status) and "failed groups" in str(status)


def test_an_environment_that_blocks_its_event_loop_is_ended_naming_the_line(
    tmp_path: Path, servers: tuple[str, str]
) -> None:
    config = fault_config(tmp_path, servers, "block", fault_every=1, worker_timeout=1)
    code, paths = run_env_process(config, timeout_s=60)

    log = paths.logs["env"].read_text()
    assert code == 1, log
    assert "event loop has been blocked for" in log
    assert 'fault_env.py", line' in log and "time.sleep(3600)" in log  # the stack shows where it is stuck
    status = failed_env_status(paths)
    assert status.env_timeouts == 1
    cause = [line for line in status.log_tail if "environment failed: the environment's event loop" in line]
    assert cause and "(item QAItem(prompt='q1='" in cause[0], status.log_tail


# ---- the trajectory API refuses what would crash or waste the trainer (in-process) ------------------------------


def post_group(group: dict[str, Any], vocab_size: int | None = VOCAB) -> httpx.Response:
    async def go() -> httpx.Response:
        app = create_app()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
            registration = {"batch_size": 4, "max_token_len": 32, "num_steps": 10, "vocab_size": vocab_size}
            (await client.post("/register", json=registration)).raise_for_status()
            response = await client.post("/scored_data", json=group)
            assert (await client.get("/status")).json()["queue_size"] == (1 if response.status_code == 200 else 0)
            return response

    return asyncio.run(go())


GOOD = {"tokens": [[1, 5, 6], [1, 7, 8]], "masks": [[-100, 5, 6], [-100, 7, 8]], "scores": [1.0, 0.0]}


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"tokens": [[1, 5, VOCAB], [1, 7, 8]]}, f"tokens: token id {VOCAB} is out of the trained model's vocabulary"),
        ({"tokens": [[1, -5, 6], [1, 7, 8]]}, "tokens: token id -5 is negative"),
        ({"masks": [[-100, -100, -100], [-100, -100, -100]]}, "masks: every value is -100"),
        ({"scores": ["high", 0.0]}, "scores[0]: Input should be a valid number"),
        ({"masks": [[-100, 5], [-100, 7, 8]]}, "masks[0]: has 2 values, tokens[0] has 3"),
        ({"scores": [1e300, -1e300]}, "scores[0]: 1e+300 is beyond +-1e+100; the group's advantages would overflow"),
    ],
)
def test_the_api_refuses_a_malformed_group_with_a_422_naming_the_field(change: dict[str, Any], detail: str) -> None:
    response = post_group({**GOOD, **change})
    assert response.status_code == 422
    assert detail in response.json()["detail"]


def test_the_api_checks_the_vocabulary_only_when_the_trainer_registered_one() -> None:
    assert post_group({**GOOD, "tokens": [[1, 5, 10_000], [1, 7, 8]]}, vocab_size=None).status_code == 200
    assert post_group(GOOD).status_code == 200
    huge = post_group({**GOOD, "tokens": [[1, 5, 2**40], [1, 7, 8]]}, vocab_size=None)
    assert huge.status_code == 422 and "token id 1099511627776 is larger than any vocabulary" in huge.text


def test_the_environment_learns_the_vocabulary_from_info() -> None:
    async def go() -> dict[str, Any]:
        app = create_app()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
            await client.post(
                "/register", json={"batch_size": 4, "max_token_len": 32, "num_steps": 1, "vocab_size": 99}
            )
            info: dict[str, Any] = (await client.get("/info")).json()
            return info

    assert asyncio.run(go()) == {"batch_size": 4, "max_token_len": 32, "vocab_size": 99}


def test_a_group_changed_after_it_was_built_is_checked_again() -> None:
    from hermes_nb.protocol.trajectory import malformed_reason

    group = ScoredDataGroup(**GOOD)
    assert malformed_reason(group, VOCAB) is None
    group.scores[1] = math.inf
    assert malformed_reason(group, VOCAB) == "scores[1]: inf is not a finite number"
    group.scores[1] = 0.0
    group.masks[1].pop()
    assert malformed_reason(group, VOCAB) == "masks[1]: has 2 values, tokens[1] has 3"


# ---- the loop watchdog, in-process with a callback instead of an exit --------------------------------------------


def watch(scenario: Any, limit: float = 0.3) -> list[tuple[str, str]]:
    """Run ``scenario(guard)`` on a loop guarded by a watchdog whose ``on_blocked`` records instead of exiting
    (and sets ``guard.reported``, so a scenario can block until the watchdog has acted, however loaded the CPU)."""
    from hermes_nb.env_host.faults import LoopWatchdog

    calls: list[tuple[str, str]] = []
    reported = threading.Event()

    def record(summary: str, stack: str) -> None:
        calls.append((summary, stack))
        reported.set()

    async def main() -> None:
        guard = LoopWatchdog(limit, record)
        guard.reported = reported  # type: ignore[attr-defined]
        guard.start()
        try:
            await scenario(guard)
        finally:
            await guard.stop()

    asyncio.run(main())
    return calls


def test_the_watchdog_names_the_call_that_blocks_the_loop() -> None:
    import time

    async def stuck_in_sync_code(guard: Any) -> None:
        deadline = time.monotonic() + 30
        while not guard.reported.is_set() and time.monotonic() < deadline:  # blocks without awaiting
            time.sleep(0.01)

    calls = watch(stuck_in_sync_code)
    assert len(calls) == 1
    summary, stack = calls[0]
    assert "event loop has been blocked for" in summary and "stuck in stuck_in_sync_code at " in summary
    assert "time.sleep(0.01)" in summary and "stuck_in_sync_code" in stack


def test_the_watchdog_looks_twice_before_it_acts() -> None:
    async def paused_then_free(guard: Any) -> None:
        # As after SIGSTOP/SIGCONT of the whole process: the last beat is old, but the loop is free to beat again.
        for _ in range(6):
            guard.beat -= 10
            await asyncio.sleep(0.3)

    assert watch(paused_then_free) == []
