"""``rl_test_inference`` of the shipped ``calculator_openenv`` against hosted models (``fake_provider`` on loopback,
the OpenEnv server and its episodes in their real child processes, in the OpenEnv Python): an agent that works
each problem out with the MCP ``calculate`` tool scores 1, one that answers wrong scores 0."""

from __future__ import annotations

import asyncio

import pytest
from fake_provider import TOOL_USER, WRONG, fake_provider, use_key
from side_envs import side_env_python

from hermes_nb import api
from hermes_nb.frameworks.openenv.interpreter import OPENENV_PYTHON_VAR
from hermes_nb.model_test.runner import rl_test_inference

# Two model tests, each starting an OpenEnv server (its import of openenv alone is ~6 s on a quiet machine).
pytestmark = pytest.mark.timeout(240)


def test_an_agent_using_the_mcp_tool_scores_1_and_a_wrong_answerer_0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OPENENV_PYTHON_VAR, str(side_env_python("openenv")))
    use_key(monkeypatch)
    asyncio.run(api.rl_select_environment("calculator_openenv"))

    with fake_provider() as (url, state):
        result = asyncio.run(
            rl_test_inference(num_steps=2, group_size=2, models=[f"{url}#{TOOL_USER}", f"{url}#{WRONG}"])
        )

    right, wrong = result.results
    assert [r.status for r in result.results] == ["ok", "ok"], str(result)
    assert (right.completions, right.correct, right.accuracy) == (4, 4, 1.0)
    assert (wrong.completions, wrong.correct, wrong.accuracy) == (4, 0, 0.0)
    answered = [c for c in state.calls_of(TOOL_USER) if c.status == 200]
    assert len(answered) == 4 * 3  # each episode: a tools/call per step in the session, then the answer
