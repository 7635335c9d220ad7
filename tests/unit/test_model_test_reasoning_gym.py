"""``rl_test_inference`` of the shipped ``reasoning_gym`` environment against hosted models (``fake_provider`` on
loopback, the environment in its real child process): a provider that gives each dataset entry's own answer is
scored fully, one that answers wrong is never correct (reasoning-gym's partial credit is not full marks)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from typing import Any

import pytest
from fake_provider import fake_provider, right_and_wrong_tested, use_key

from hermes_nb import api
from hermes_nb.system.home import shipped_environments_dir

pytest.importorskip("reasoning_gym", reason="needs the environments extra: pip install -e '.[environments]'")
pytestmark = pytest.mark.timeout(240)

MIX_EDITS: dict[str, Any] = {
    "env.datasets": {"chain_sum": 1.0, "products": 1.0},
    "env.dataset_params": {"chain_sum": {"max_terms": 2, "max_digits": 1}, "products": {"max_digits": 1}},
}
# rl_test_inference draws its items from the seeded training stream; these cover its groups with room to spare.
ITEMS_REGISTERED = 50


def right_answers(env_values: dict[str, Any]) -> dict[str, str]:
    """Prompt -> the dataset's own answer for the first training items the environment hands out with these values."""
    spec = importlib.util.spec_from_file_location(
        "model_test_rg_env", shipped_environments_dir() / "reasoning_gym_tasks.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    env = module.ReasoningGymEnv(module.ReasoningGymConfig(**env_values))
    items = [env.train_item() for _ in range(ITEMS_REGISTERED)]
    return {item.prompt: item.answer for item in items}


def test_a_right_provider_scores_fully_and_a_wrong_one_not_at_all(monkeypatch: pytest.MonkeyPatch) -> None:
    use_key(monkeypatch)
    asyncio.run(api.rl_select_environment("reasoning_gym"))
    asyncio.run(api.rl_edit_config(MIX_EDITS))
    values = {name.removeprefix("env."): value for name, value in MIX_EDITS.items()}
    with fake_provider() as (url, state):
        state.answers.update(right_answers(values))
        _, right, wrong = right_and_wrong_tested(url)
    assert right.format_failures == 0 and wrong.format_failures == 0
    asked = {call.prompt for call in state.calls if call.status == 200}
    assert asked and asked <= set(state.answers)  # every prompt answered came from the registered entries
