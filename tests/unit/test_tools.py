"""The JSON-string tools for LLM agents: the original tool's names, JSON answers, {"error": ...} on mistakes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from core_env_files import SIMPLE_ENV, write_env

from hermes_nb import tools


@pytest.fixture(autouse=True)
def envs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_env(tmp_path / "envs", "simple.py", SIMPLE_ENV)
    monkeypatch.setenv("HERMES_NB_ENV_PATH", str(tmp_path / "envs"))


def call(name: str, *args: object) -> dict[str, Any]:
    answer = asyncio.run(tools.all_tools()[name](*args))
    assert isinstance(answer, str)
    data: dict[str, Any] = json.loads(answer)
    return data


def test_the_flow_of_the_original_tool_works_with_json_answers() -> None:
    listed = call("rl_list_environments")
    assert "simple" in [e["name"] for e in listed["environments"]]
    assert call("rl_select_environment", "simple")["environment"] == "simple"
    assert call("rl_edit_config", "group_size", 4)["value"] == 4
    config = call("rl_get_current_config")
    assert {"configurable_fields", "locked_fields", "environment"} <= set(config)


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("rl_select_environment", ("nosuch",), "unknown environment 'nosuch'"),
        ("rl_edit_config", ("group_size", 4), "select an environment first"),
        ("rl_edit_config", ("wandb.entity", "me"), "locked"),
        ("rl_load_config", ("/no/such.yaml",), "cannot be read"),
    ],
)
def test_user_errors_are_json_error_answers(name: str, args: tuple[object, ...], expected: str) -> None:
    answer = call(name, *args)
    assert list(answer) == ["error"]
    assert expected in str(answer["error"])


def test_tool_names_match_the_original() -> None:
    assert {"rl_list_environments", "rl_select_environment", "rl_get_current_config", "rl_edit_config"} <= set(
        tools.all_tools()
    )
    assert tools.rl_edit_config.__name__ == "rl_edit_config"
