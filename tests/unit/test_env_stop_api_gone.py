"""An environment whose trajectory API went away still stops at once when asked: its requests to the API are
retried for half a minute, and a stop must not wait for them (the supervisor waits for the environment before a
stopped or failed run has no process left; the crash-point matrix kills the API mid-run and mid-stop)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from env_host_fakes import fake_inference_server, trajectory_api_process, write_tiny_env

from hermes_nb.config import InfraConfig, RunConfig, WandbConfig
from hermes_nb.env_host import loop as runtime
from hermes_nb.env_host import trajectory_link as api_link
from hermes_nb.env_host.loading import load_env_class, make_env
from hermes_nb.protocol.trajectory import Registration
from hermes_nb.trajectory_api.client import TrajectoryClient

# Well under the link's half-minute of retries (a stop that waited for them would take that long), well over a
# loaded machine's hiccup.
STOP_WITHIN_S = api_link.REQUEST_RETRY_S / 3


def test_a_stop_ends_serve_at_once_while_requests_to_a_vanished_api_are_retried(tmp_path: Path) -> None:
    async def scenario(inference_url: str) -> tuple[runtime.ServeOutcome, float]:
        with trajectory_api_process(tmp_path / "api.log") as api_url:
            infra = InfraConfig(run_id="t1", run_dir=str(tmp_path), api_url=api_url, inference_url=inference_url)
            env_values = {"group_size": 2, "batch_size": 4, "max_num_workers": 2, "steps_per_eval": 0}
            config = RunConfig(env=env_values, infra=infra, wandb=WandbConfig(mode="disabled"))
            env = make_env(load_env_class(str(write_tiny_env(tmp_path))), config)
            async with TrajectoryClient(api_url) as api:
                await api.register(Registration(batch_size=4, max_token_len=64, num_steps=100))
                stop = asyncio.Event()
                serving = asyncio.create_task(runtime.serve(env, config, stop=stop, handle_signals=False))
                while not (await api.health()).num_envs:
                    await asyncio.sleep(0.05)
        # The API is gone (leaving the block ended its process); the environment now retries its status polls.
        await asyncio.sleep(2 * runtime.POLL_S)
        stop.set()
        asked = time.monotonic()
        outcome = await asyncio.wait_for(serving, 60)
        return outcome, time.monotonic() - asked

    with fake_inference_server() as (inference_url, _):
        outcome, seconds = asyncio.run(scenario(inference_url))

    assert outcome.status == "stopped"
    assert seconds < STOP_WITHIN_S


@pytest.fixture(autouse=True)
def _quick_disconnect(monkeypatch: pytest.MonkeyPatch) -> None:
    """Connection refused answers disconnect-env at once anyway; this keeps a slow refusal from counting."""
    from hermes_nb.env_host import trajectory_link as api_link

    monkeypatch.setattr(api_link, "DISCONNECT_TIMEOUT_S", 1.0)
