"""Shared fixtures: every test gets its own hermes-nb home, so no test sees another's runs or state."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def hermes_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("hermes_home")
    monkeypatch.setenv("HERMES_NB_HOME", str(home))
    monkeypatch.delenv("HERMES_NB_ENV_PATH", raising=False)
    # Tests never talk to W&B's servers; offline mode still writes real W&B files.
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for key in ("TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    yield home


@pytest.fixture(scope="session", autouse=True)
def _single_threaded_torch() -> None:
    # Two cores are shared by the test processes and the servers they start.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
