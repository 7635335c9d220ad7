"""The training loop: in process with a list of batches, and as the real trainer process against the real
trajectory API, fed with groups sampled from the trainer's own inference server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

from hermes_nb.config import RunConfig, TrainerConfig
from hermes_nb.metrics.logger import MetricsLogger
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.checkpoints import read_checkpoints
from hermes_nb.protocol.recorded_batches import read_trajectories
from hermes_nb.protocol.run_files import CHECKPOINTS_FILE
from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.runs.supervision.supervisor import TRAINER_MODULE
from hermes_nb.system.net import free_port
from hermes_nb.testing import make_tiny_model
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.run.loop import LoopSettings, run_training, train_step
from hermes_nb.trainer.run.main import wait_for_final_evaluation
from hermes_nb.trajectory_api.client import SyncTrajectoryClient

torch.set_num_threads(1)
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


def _group(first: int, scores: list[float]) -> ScoredDataGroup:
    tokens = [[first, first + 1, 20 + i, 30 + i] for i in range(len(scores))]
    masks = [[-100, -100, t[2], t[3]] for t in tokens]
    return ScoredDataGroup(tokens=tokens, masks=masks, scores=scores)


class ListSource:
    def __init__(self, batches: list[list[ScoredDataGroup]], stop_after: int | None = None) -> None:
        self.batches, self.stop_after, self.served = list(batches), stop_after, 0

    def next_batch(self, stop: threading.Event) -> list[ScoredDataGroup] | None:
        if not self.batches:
            return None
        self.served += 1
        if self.stop_after is not None and self.served >= self.stop_after:
            stop.set()  # a SIGTERM arriving while the step trains
        return self.batches.pop(0)


def _settings(tmp_path: Path, model_dir: Path, total_steps: int, interval: int) -> tuple[LoopSettings, RunConfig]:
    trainer = TrainerConfig(base_model=str(model_dir), save_checkpoint_interval=interval, learning_rate=1e-3)
    config = RunConfig(env={"batch_size": 4, "total_steps": total_steps}, trainer=trainer)
    return LoopSettings.from_config(config, tmp_path), config


def test_loop_logs_every_step_checkpoints_and_records_batches(model_dir: Path, tmp_path: Path) -> None:
    settings, config = _settings(tmp_path, model_dir, total_steps=3, interval=2)
    metrics = MetricsLogger(tmp_path / "metrics.jsonl")
    batches = [[_group(5, [1.0, 0.0]), _group(7, [0.0, 0.0])] for _ in range(3)]
    outcome = run_training(
        LocalBackend(model_dir), ListSource(batches), settings, config, stop=threading.Event(), metrics=metrics
    )
    metrics.close()
    assert (outcome.reason, outcome.last_step) == ("completed", 3)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for key in (
        keys.TRAIN_LOSS,
        keys.TRAIN_LEARNING_RATE,
        keys.TRAIN_STEP_SECONDS,
        keys.TRAIN_TOKENS_PER_SECOND,
        keys.TRAIN_SEQUENCES_PER_SECOND,
    ):
        assert key in rows[0]["values"]
    assert rows[0]["values"][keys.TRAIN_REWARD_MEAN] == 0.25
    assert rows[0]["values"][keys.TRAIN_PERCENT_CORRECT] == 0.25
    assert [(c.step, c.kind) for c in read_checkpoints(tmp_path / CHECKPOINTS_FILE)] == [(2, "interval"), (3, "final")]
    assert [step for step, _ in read_trajectories(tmp_path / "trajectories.jsonl.gz")] == [1, 2, 3]


def test_stop_finishes_the_step_and_saves_a_stop_checkpoint(model_dir: Path, tmp_path: Path) -> None:
    settings, config = _settings(tmp_path, model_dir, total_steps=10, interval=0)
    batches = [[_group(5, [1.0, 0.0])] for _ in range(10)]
    metrics = MetricsLogger(tmp_path / "metrics.jsonl")
    outcome = run_training(
        LocalBackend(model_dir),
        ListSource(batches, stop_after=2),
        settings,
        config,
        stop=threading.Event(),
        metrics=metrics,
    )
    metrics.close()
    assert (outcome.reason, outcome.last_step) == ("stopped", 2)
    assert [(c.step, c.kind) for c in read_checkpoints(tmp_path / CHECKPOINTS_FILE)] == [(2, "stop")]


def test_a_batch_without_signal_takes_no_optimizer_step(model_dir: Path) -> None:
    backend = LocalBackend(model_dir)
    before = [p.clone() for p in backend.model.parameters()]
    values = train_step(backend, [_group(5, [1.0, 1.0])], TrainerConfig())
    assert values[keys.TRAIN_LOSS] == 0.0 and values["train/trained_sequences"] == 0
    assert all(torch.equal(a, b) for a, b in zip(before, backend.model.parameters(), strict=True))


# ---- the real processes ---------------------------------------------------------------------------------


def _wait(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}


@pytest.fixture
def api_url(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    with (tmp_path / "api.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hermes_nb.trajectory_api", "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_env(),
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: _ok(f"{url}/health"), 30, "the trajectory API")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _start_trainer(tmp_path: Path, model_dir: Path, api_url: str, total_steps: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    config = RunConfig(
        env={"batch_size": 8, "total_steps": total_steps, "group_size": 4, "max_token_length": 32},
        trainer=TrainerConfig(
            base_model=str(model_dir), save_checkpoint_interval=2, learning_rate=1e-3, torch_threads=1
        ),
        infra={"api_url": api_url, "inference_port": port, "run_dir": str(tmp_path), "run_id": "t1"},
    )
    config.save(tmp_path / "config.yaml")
    with (tmp_path / "trainer.log").open("w") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", TRAINER_MODULE, "--config", str(tmp_path / "config.yaml")],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_env(),
        )
    return proc, f"http://127.0.0.1:{port}"


def _post_sampled_groups(api_url: str, inference_url: str, count: int) -> None:
    """Groups sampled from the trainer's own server, scored by a toy rule (first sampled token is even)."""
    for i in range(count):
        prompt = [10 + i % 5, 11]
        sampled = httpx.post(
            f"{inference_url}/generate", timeout=30, json={"prompt_token_ids": [prompt], "n": 4, "max_tokens": 4}
        ).json()["sequences"]
        tokens = [prompt + s["token_ids"] for s in sampled]
        group = {
            "tokens": tokens,
            "masks": [[-100] * len(prompt) + s["token_ids"] for s in sampled],
            "scores": [float(s["token_ids"][0] % 2 == 0) for s in sampled],
            "inference_logprobs": [[1.0] * len(prompt) + s["logprobs"] for s in sampled],
        }
        httpx.post(f"{api_url}/scored_data", json=group, timeout=10).raise_for_status()


def _register_env(api_url: str) -> int:
    body = {"max_token_length": 32, "desired_name": "fake", "group_size": 4}
    answer = httpx.post(f"{api_url}/register-env", json=body, timeout=10).json()
    assert answer["status"] == "success", answer
    return int(answer["env_id"])


def _register_trainer(api_url: str) -> None:
    body = {"batch_size": 8, "max_token_len": 32, "num_steps": 3, "wandb_group": "", "wandb_project": "p"}
    httpx.post(f"{api_url}/register", json=body, timeout=10).raise_for_status()


# Half the waiter's default grace: a thread still alive then is waiting that grace out (a loaded machine's HTTP
# round trips take well under this).
WELL_BEFORE_DEFAULT_GRACE_S = 15.0


def _waiter(api_url: str, stop: threading.Event, grace: float = 30.0) -> threading.Thread:
    api = SyncTrajectoryClient(api_url)
    thread = threading.Thread(target=lambda: (wait_for_final_evaluation(api, stop, grace), api.close()))
    thread.start()
    return thread


def test_final_wait_lasts_while_an_environment_is_registered(api_url: str) -> None:
    _register_trainer(api_url)
    env_id = _register_env(api_url)
    waiter = _waiter(api_url, threading.Event())
    waiter.join(1.0)
    assert waiter.is_alive()
    httpx.post(f"{api_url}/disconnect-env", json={"env_id": env_id}, timeout=10).raise_for_status()
    waiter.join(2.0)
    assert not waiter.is_alive()


def test_final_wait_ends_at_once_on_stop_and_after_the_grace(api_url: str) -> None:
    _register_trainer(api_url)
    _register_env(api_url)
    stop = threading.Event()
    waiter = _waiter(api_url, stop)
    waiter.join(0.5)
    assert waiter.is_alive()
    stop.set()
    waiter.join(1.0)
    assert not waiter.is_alive()
    graced = _waiter(api_url, threading.Event(), grace=0.5)
    graced.join(WELL_BEFORE_DEFAULT_GRACE_S)
    assert not graced.is_alive()  # it ended after its own 0.5 s, not after the 30 s the helper defaults to


def test_final_wait_skips_without_environments_or_without_an_api(api_url: str) -> None:
    for url in (api_url, f"http://127.0.0.1:{free_port()}"):
        waiter = _waiter(url, threading.Event())
        waiter.join(WELL_BEFORE_DEFAULT_GRACE_S)
        assert not waiter.is_alive(), url  # skipped: a wait would last the 30 s grace


@pytest.mark.slow  # two real processes; ~10 s idle, ~35 s on a loaded 2-core machine
def test_trainer_process_trains_against_the_api_and_exits_0(model_dir: Path, tmp_path: Path, api_url: str) -> None:
    proc, inference_url = _start_trainer(tmp_path, model_dir, api_url, total_steps=3)
    try:
        _wait(lambda: _ok(f"{inference_url}/health"), 60, "the trainer's inference server")
        _wait(lambda: httpx.get(f"{api_url}/health").json().get("trainer_registered"), 30, "registration")
        env_id = _register_env(api_url)
        _post_sampled_groups(api_url, inference_url, count=6)  # 3 batches of 2 groups x 4
        _wait(
            lambda: [c.kind for c in read_checkpoints(tmp_path / CHECKPOINTS_FILE)][-1:] == ["final"],
            60,
            "the final checkpoint",
        )
        # The environment's final evaluation samples from this server: it stays up while the env is registered.
        time.sleep(1.0)
        assert proc.poll() is None and _ok(f"{inference_url}/health")
        httpx.post(f"{api_url}/disconnect-env", json={"env_id": env_id}, timeout=10).raise_for_status()
        # The exit itself is the behaviour: its teardown (the sampler child, the W&B mirror) takes seconds on a loaded
        # machine.
        assert proc.wait(60) == 0, (tmp_path / "trainer.log").read_text()
    finally:
        proc.kill()
        proc.wait(10)  # reaped: a Popen left running warns in whichever test collects it
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [(c.step, c.kind) for c in read_checkpoints(tmp_path / CHECKPOINTS_FILE)] == [(2, "interval"), (3, "final")]
    assert "trainer completed at step 3" in (tmp_path / "trainer.log").read_text()


@pytest.mark.slow  # two real processes; ~10 s idle, ~35 s on a loaded 2-core machine
def test_sigterm_saves_a_stop_checkpoint_and_exits_0(model_dir: Path, tmp_path: Path, api_url: str) -> None:
    proc, inference_url = _start_trainer(tmp_path, model_dir, api_url, total_steps=50)
    try:
        _wait(lambda: _ok(f"{inference_url}/health"), 60, "the trainer's inference server")
        _wait(lambda: httpx.get(f"{api_url}/health").json().get("trainer_registered"), 30, "registration")
        _post_sampled_groups(api_url, inference_url, count=2)
        metrics = tmp_path / "metrics.jsonl"
        _wait(lambda: metrics.is_file() and metrics.read_text().strip() != "", 30, "the first step")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, (tmp_path / "trainer.log").read_text()
    finally:
        proc.kill()
        proc.wait(10)  # reaped: a Popen left running warns in whichever test collects it
    assert [(c.step, c.kind) for c in read_checkpoints(tmp_path / CHECKPOINTS_FILE)] == [(1, "stop")]
    assert "trainer stopped at step 1" in (tmp_path / "trainer.log").read_text()
