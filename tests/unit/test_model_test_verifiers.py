"""``rl_test_inference`` of the shipped ``addition_verifiers`` against hosted models (``fake_provider`` on loopback,
the episodes run by verifiers in their real child processes, in the verifiers Python, through verifiers' eval
client): a provider that adds right scores 1, one that answers wrong scores 0."""

from __future__ import annotations

import asyncio

import pytest
from fake_provider import fake_provider, right_and_wrong_tested, use_key
from side_envs import side_env_python

from hermes_nb import api
from hermes_nb.frameworks.verifiers.interpreter import VERIFIERS_PYTHON_VAR

# Two model tests, each starting the verifiers environment process and 8 chat programs under uv.
pytestmark = pytest.mark.timeout(240)


def test_a_right_provider_scores_1_and_a_wrong_one_0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VERIFIERS_PYTHON_VAR, str(side_env_python("verifiers")))
    use_key(monkeypatch)
    asyncio.run(api.rl_select_environment("addition_verifiers"))

    with fake_provider() as (url, state):
        right_and_wrong_tested(url)

    assert all(call.path == "chat" for call in state.calls)  # verifiers' chat program, through the eval client
