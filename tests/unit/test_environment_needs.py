"""An environment declares the trainer settings it needs (``BaseEnv.trainer_needs``): selecting it applies them,
and a start refuses, before anything is created, a base model whose chat template cannot render its tools."""

from __future__ import annotations

import asyncio

import pytest

from hermes_nb.api import rl_select_environment
from hermes_nb.config import EMBEDDED_BASE_MODEL, EMBEDDED_CHAT_MODEL
from hermes_nb.errors import ConfigError
from hermes_nb.runs.commands import rl_start_training
from hermes_nb.system import home


def test_selecting_an_agent_environment_sets_the_chat_model_it_needs() -> None:
    selection = asyncio.run(rl_select_environment("calculator_agent"))

    base_model = next(f for f in selection.config.configurable if f.name == "trainer.base_model")
    assert base_model.value == EMBEDDED_CHAT_MODEL


def test_a_start_with_a_model_that_cannot_render_the_tools_is_refused_naming_the_one_that_can() -> None:
    asyncio.run(rl_select_environment("calculator_agent"))

    with pytest.raises(ConfigError) as raised:
        asyncio.run(rl_start_training(**{"trainer.base_model": EMBEDDED_BASE_MODEL}))

    message = str(raised.value)
    assert message.startswith(f"trainer.base_model: the chat template of {EMBEDDED_BASE_MODEL!r} does not render")
    assert f"set trainer.base_model to {EMBEDDED_CHAT_MODEL!r}" in message
    runs = home.home_dir() / "runs"
    assert not runs.exists() or list(runs.iterdir()) == []
