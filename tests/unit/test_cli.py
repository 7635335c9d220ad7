"""The hermes-nb command line: real processes sharing the session with this one."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from core_env_files import SIMPLE_ENV, write_env

from hermes_nb import api

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def envs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "envs"
    write_env(directory, "simple.py", SIMPLE_ENV)
    monkeypatch.setenv("HERMES_NB_ENV_PATH", str(directory))
    return directory


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "hermes_nb.cli", *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_list_select_edit_config_across_processes(envs: Path) -> None:
    listed = cli("list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "simple" in [e["name"] for e in json.loads(listed.stdout)["environments"]]
    assert cli("select", "simple").returncode == 0
    edited = cli("edit", "group_size=4", "trainer.learning_rate=1e-4")
    assert edited.returncode == 0, edited.stderr
    assert "Updated 2 fields" in edited.stdout
    shown = json.loads(cli("config", "--json").stdout)
    values = {f["name"]: f["current_value"] for f in shown["configurable_fields"]}
    assert (values["env.group_size"], values["trainer.learning_rate"]) == (4, 1e-4)
    # The kernel-side API sees what the other process did.
    view = asyncio.run(api.rl_get_current_config())
    assert view.environment == "simple" and view.values()["env.group_size"] == 4


def test_an_edit_in_this_process_is_seen_by_the_cli(envs: Path) -> None:
    asyncio.run(api.rl_select_environment("simple"))
    asyncio.run(api.rl_edit_config("digits", 6))
    shown = json.loads(cli("config", "--json").stdout)
    assert {f["name"]: f["current_value"] for f in shown["configurable_fields"]}["env.digits"] == 6


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("select", "nosuch"), "unknown environment 'nosuch'"),
        (("edit", "group_size"), "edit expects FIELD=VALUE"),
        (("edit", "trainer.learning_rate=-1"), "trainer.learning_rate: Input should be greater than 0"),
        (("edit", "wandb.entity=me"), "wandb.entity is locked"),
        (("load", "/no/such/file.yaml"), "cannot be read"),
    ],
)
def test_user_errors_exit_2_with_one_line_and_no_traceback(envs: Path, args: tuple[str, ...], expected: str) -> None:
    result = cli(*args)
    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_load_reset_and_help(envs: Path) -> None:
    assert cli("select", "simple").returncode == 0
    loaded = cli("load", "configs/quick_test.yaml", "--json")
    assert json.loads(loaded.stdout)["changed"]["env.group_size"] == 4
    reset = json.loads(cli("reset", "--json").stdout)
    assert {f["name"]: f["current_value"] for f in reset["configurable_fields"]}["env.group_size"] == 8
    helped = cli("--help")
    assert helped.returncode == 0 and "select" in helped.stdout
