"""The OpenEnv adapter's pieces: recognition without import, the episode settings' schema, reward aggregation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_nb.frameworks import registry
from hermes_nb.frameworks.openenv import schema_child
from hermes_nb.frameworks.openenv.episode_env import observation_text
from hermes_nb.frameworks.openenv.rewards import RewardError, checked_reward, episode_score
from hermes_nb.frameworks.openenv.session import McpTool, tool_result_text, ws_url
from hermes_nb.selection import schema_child as generic_schema_child
from hermes_nb.selection.discovery import root_framework

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "environments" / "calculator_openenv.py"


def test_openenv_roots_are_claimed_by_the_openenv_adapter():
    assert root_framework("openenv.core.env_server.mcp_environment.MCPEnvironment") == "openenv"
    assert root_framework("openenv.core.env_server.interfaces.Environment") == "openenv"
    assert registry.adapter("openenv").recognition.mark == "[openenv] "


def test_an_unqualified_environment_base_is_not_taken_for_openenv():
    assert root_framework("Environment") is None


def test_the_schema_child_answers_without_importing_the_file():
    # hermes-nb's own interpreter has no openenv: the answer comes anyway, so the file was not imported.
    done = subprocess.run(
        [sys.executable, "-m", schema_child.__name__, str(EXAMPLE), "CalculatorEnvironment"],
        capture_output=True, text=True, cwd=ROOT, check=True,
    )  # fmt: skip
    [line] = [line for line in done.stdout.splitlines() if line.startswith(schema_child.MARKER)]
    answer = json.loads(line[len(schema_child.MARKER) :])
    assert answer["config_class"] == "OpenEnvSettings"
    assert answer["values"]["reward"] == "sum"
    assert {"server_url", "observation_field", "action_field", "max_turns"} <= set(answer["json_schema"]["properties"])


def test_the_schema_child_marks_its_answer_as_the_generic_child_does():
    assert schema_child.MARKER == generic_schema_child.MARKER


def test_the_schema_child_refuses_a_missing_file(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", schema_child.__name__, str(tmp_path / "gone.py"), "Env"], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "gone.py is not a file" in done.stderr


@pytest.mark.parametrize(("how", "expected"), [("sum", 1.5), ("last", 1.0), ("discounted", 0.5 + 0.5 * 1.0)])
def test_rewards_aggregate_as_configured(how, expected):
    assert episode_score([0.5, 1.0], how, discount=0.5) == pytest.approx(expected)


def test_an_episode_without_rewards_scores_zero():
    assert episode_score([], "sum", discount=0.9) == 0.0


@pytest.mark.parametrize("value", ["ten", float("nan"), float("inf"), True, [1.0]])
def test_a_reward_that_is_not_a_number_is_refused_naming_it(value):
    with pytest.raises(RewardError, match="is not a number"):
        checked_reward(value, "step")


def test_no_reward_is_none_and_an_int_is_a_float():
    assert checked_reward(None, "step") is None
    assert checked_reward(2, "step") == 2.0


def test_an_mcp_tool_becomes_an_openai_tool():
    tool = McpTool.model_validate({"name": "calculate", "description": "math", "inputSchema": {"type": "object"}})
    spec = tool.as_tool_spec()
    assert spec.function.name == "calculate"
    assert spec.function.parameters == {"type": "object"}


def test_tool_results_read_as_text():
    assert tool_result_text("48") == "48"
    assert tool_result_text({"content": [{"type": "text", "text": "48"}]}) == "48"
    assert tool_result_text({"structured_content": {"result": "48"}}) == '{"result": "48"}'


def test_an_observation_becomes_its_only_text_field_or_json():
    assert observation_text({"prompt": "hi", "metadata": {}, "done": False}, None) == "hi"
    assert json.loads(observation_text({"a": "x", "b": 2}, None)) == {"a": "x", "b": 2}
    assert observation_text({"a": "x", "b": "y"}, "b") == "y"


def test_the_session_url_is_the_servers_ws_endpoint():
    assert ws_url("http://127.0.0.1:8000/") == "ws://127.0.0.1:8000/ws"
    assert ws_url("https://env.example") == "wss://env.example/ws"


def test_the_environment_class_handed_to_the_process_is_the_episode_env_without_importing_it_in_the_kernel() -> None:
    from hermes_nb.frameworks.openenv import episode_env, handoff

    assert Path(episode_env.__file__).resolve() == handoff.EPISODE_ENV_FILE
    assert episode_env.OpenEnvAgentEnv.__name__ == handoff.EPISODE_ENV_CLASS
