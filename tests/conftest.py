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
    # Each test starts its runs cold (its own home, its own environment: no warm kit could serve the next test
    # anyway); tests/e2e/test_warm_start.py turns warm starts on.
    monkeypatch.setenv("HERMES_NB_WARM_START", "0")
    for key in ("TINKER_API_KEY", "WANDB_API_KEY", "OPENROUTER_API_KEY", "HF_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    yield home


@pytest.fixture(scope="session", autouse=True)
def _cold_starts() -> Iterator[None]:
    # Selecting an environment starts a warm kit for the first run. A module-scoped fixture is set up before each
    # test's own `hermes_home` turns warm starts off, so without this its run would start warm and its kit outlive
    # the module; a run's warm processes get its environment over their pipe, not in /proc/PID/environ.
    saved = os.environ.get("HERMES_NB_WARM_START")
    os.environ["HERMES_NB_WARM_START"] = "0"
    yield
    if saved is None:
        os.environ.pop("HERMES_NB_WARM_START", None)
    else:
        os.environ["HERMES_NB_WARM_START"] = saved


@pytest.fixture(scope="session", autouse=True)
def _single_threaded_torch() -> None:
    # Two cores are shared by the test processes and the servers they start.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def _no_user_key_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # Keys are also read from ~/.hermes/.env: a developer's real OPENROUTER_API_KEY there would send tests to hosted
    # models. HOME moves to an empty folder; the caches stay where they are, so nothing is rebuilt per run.
    real_home = Path.home()
    saved = {name: os.environ.get(name) for name in ("HOME", "XDG_CACHE_HOME", "MPLCONFIGDIR")}
    os.environ.setdefault("XDG_CACHE_HOME", str(real_home / ".cache"))
    os.environ.setdefault("MPLCONFIGDIR", str(real_home / ".config" / "matplotlib"))
    os.environ["HOME"] = str(tmp_path_factory.mktemp("user_home"))
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
