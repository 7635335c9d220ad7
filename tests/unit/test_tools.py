"""The JSON-string tools for LLM agents: the Hermes RL tool's names, JSON answers, {"error": ...} on mistakes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from core_env_files import SIMPLE_ENV, write_env
from run_dirs import FINISHED_ID, write_finished_run

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


def test_the_run_lifecycle_tools_have_the_original_names() -> None:
    lifecycle = {"rl_start_training", "rl_check_status", "rl_stop_training", "rl_list_runs", "rl_get_results"}
    assert lifecycle | {"rl_tail_logs"} <= set(tools.all_tools())
    assert all(tools.all_tools()[name].__name__ == name for name in lifecycle)


def test_run_tools_answer_json_on_a_finished_run() -> None:
    write_finished_run()
    assert call("rl_list_runs")["count"] == 1
    assert call("rl_check_status", FINISHED_ID)["progress"] == "4/4"
    assert call("rl_get_results", FINISHED_ID)["best_metrics"]["train/reward_mean"] == 0.9
    assert call("rl_stop_training", FINISHED_ID)["message"] == f"Run {FINISHED_ID} was already completed"
    assert call("rl_tail_logs", FINISHED_ID, "trainer", 1)["lines"] == ["trainer line 100"]


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("rl_start_training", (), "no environment selected"),
        ("rl_check_status", ("20240101-000000-nosuchrunx",), "unknown run '20240101-000000-nosuchrunx'"),
        ("rl_stop_training", (), "no runs yet"),
        ("rl_get_results", (), "no runs yet"),
        ("rl_tail_logs", (None, "worker"), "not a process of a run"),
    ],
)
def test_run_tool_mistakes_are_json_error_answers(name: str, args: tuple[object, ...], expected: str) -> None:
    answer = call(name, *args)
    assert list(answer) == ["error"]
    assert expected in str(answer["error"])
