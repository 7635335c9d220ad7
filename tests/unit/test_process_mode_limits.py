"""``process`` (groups to a JSONL, no API) keeps the environment's own limits, as ``serve`` does: a group that
runs past ``env.worker_timeout`` fails, and ``env.max_consecutive_failures`` failures in a row end it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hermes_nb.env import BaseEnv, BaseEnvConfig
from hermes_nb.env_host.process_command import process
from hermes_nb.errors import HermesNBError


class BrokenEnv(BaseEnv):
    """Every group raises, or sleeps for ``hang_s`` first."""

    def __init__(self, config: BaseEnvConfig, hang_s: float = 0.0) -> None:
        super().__init__(config)
        self.hang_s = hang_s
        self.attempts = 0

    async def get_next_item(self) -> Any:
        return {"n": self.attempts}

    async def collect_trajectories(self, item: Any) -> Any:
        self.attempts += 1
        await asyncio.sleep(self.hang_s)
        raise RuntimeError("the reward model is down")


def test_failures_in_a_row_stop_at_the_environments_limit(tmp_path: Path) -> None:
    env = BrokenEnv(BaseEnvConfig(max_consecutive_failures=3))

    with pytest.raises(HermesNBError, match=r"3 groups failed in a row .*env.max_consecutive_failures = 3"):
        asyncio.run(process(env, 10, tmp_path / "groups.jsonl"))
    assert env.attempts == 3


def test_a_group_past_the_worker_timeout_fails_instead_of_hanging(tmp_path: Path) -> None:
    env = BrokenEnv(BaseEnvConfig(max_consecutive_failures=2, worker_timeout=0.2), hang_s=60.0)

    with pytest.raises(HermesNBError, match=r"did not return within 0.2 s \(env.worker_timeout\)"):
        asyncio.run(asyncio.wait_for(process(env, 5, tmp_path / "groups.jsonl"), timeout=30))
    assert env.attempts == 2
