"""``rl_test_inference`` of the shipped verifiers environments against hosted models (``fake_provider`` on loopback,
the episodes run by verifiers in their real child processes, in the verifiers Python, through verifiers' eval
client): on ``addition_verifiers`` a provider that adds right scores 1, one that answers wrong 0; on
``calculator_verifiers`` an agent that works each problem out with the ``calculate`` tool scores 1, a wrong
answerer 0."""

from __future__ import annotations

import asyncio

import pytest
from fake_provider import TOOL_USER, WRONG, fake_provider, right_and_wrong_tested, use_key
from side_envs import side_env_python

from hermes_nb import api
from hermes_nb.frameworks.verifiers.interpreter import VERIFIERS_PYTHON_VAR
from hermes_nb.model_test.runner import rl_test_inference

# Two model tests, each starting the verifiers environment process and 8 chat programs under uv.
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(autouse=True)
def _verifiers_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VERIFIERS_PYTHON_VAR, str(side_env_python("verifiers")))
    use_key(monkeypatch)


def test_a_right_provider_scores_1_and_a_wrong_one_0() -> None:
    asyncio.run(api.rl_select_environment("addition_verifiers"))

    with fake_provider() as (url, state):
        right_and_wrong_tested(url)

    assert all(call.path == "chat" for call in state.calls)  # verifiers' chat program, through the eval client


def test_an_agent_using_the_calculate_tool_scores_1_and_a_wrong_answerer_0() -> None:
    asyncio.run(api.rl_select_environment("calculator_verifiers"))
    asyncio.run(api.rl_edit_config({"env.max_turns": 4}))

    with fake_provider() as (url, state):
        result = asyncio.run(
            rl_test_inference(num_steps=2, group_size=2, models=[f"{url}#{TOOL_USER}", f"{url}#{WRONG}"])
        )

    right, wrong = result.results
    assert [r.status for r in result.results] == ["ok", "ok"], str(result)
    assert (right.completions, right.correct, right.accuracy) == (4, 4, 1.0)
    assert (wrong.completions, wrong.correct, wrong.accuracy) == (4, 0, 0.0)
    answered = [c for c in state.calls_of(TOOL_USER) if c.status == 200]
    assert len(answered) == 4 * 3  # each episode: a calculate call per step, then the answer
