"""Editing the run config: names, text coercion, validation, and no change at all after any refused edit."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from core_env_files import SIMPLE_ENV, write_env

from hermes_nb import api
from hermes_nb.errors import (
    HermesNBError,
    InvalidValueError,
    LockedFieldError,
    NoEnvironmentSelectedError,
    UnknownFieldError,
)
from hermes_nb.selection import editing, service, session
from hermes_nb.selection.editing import parse_assignments


@pytest.fixture
def selected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    write_env(tmp_path / "envs", "simple.py", SIMPLE_ENV)
    monkeypatch.setenv("HERMES_NB_ENV_PATH", str(tmp_path / "envs"))
    asyncio.run(api.rl_select_environment("simple"))
    yield


def values() -> dict[str, Any]:
    return asyncio.run(api.rl_get_current_config()).values()


def edit(field: Any, value: Any = None) -> dict[str, Any]:
    return asyncio.run(api.rl_edit_config(field, value)).changed


def snapshot() -> tuple[dict[str, Any], bytes]:
    return values(), session.session_path().read_bytes()


def test_dotted_and_bare_names_edit_the_same_field(selected: None) -> None:
    assert edit("env.group_size", 4) == {"env.group_size": 4}
    assert edit("group_size", 6) == {"env.group_size": 6}
    assert edit("learning_rate", 1e-3) == {"trainer.learning_rate": 1e-3}
    assert values()["env.group_size"] == 6


@pytest.mark.parametrize(
    ("field", "text", "expected"),
    [
        ("trainer.learning_rate", "1e-4", 1e-4),
        ("env.group_size", "12", 12),
        ("env.include_messages", "true", True),
        ("trainer.torch_threads", "none", None),
        ("env.label", "null", None),
        ("env.operation", "mixed", "mixed"),
        ("wandb.run_name", "my run", "my run"),
    ],
)
def test_text_values_are_coerced(selected: None, field: str, text: str, expected: Any) -> None:
    if field == "trainer.torch_threads":
        edit(field, 2)
    if field == "env.label":
        edit(field, "x")
    edit(field, text)
    assert values()[field] == expected


def test_environment_values_start_from_config_init(selected: None) -> None:
    view = asyncio.run(api.rl_get_current_config())
    fields = {f.name: f for f in view.configurable}
    assert fields["env.digits"].value == 3
    assert fields["env.digits"].default == 3
    assert fields["env.digits"].constraints == {"ge": 1, "le": 6}
    assert fields["env.operation"].constraints == {"choices": ["add", "sub", "mixed"]}
    assert fields["env.group_size"].type == "int"
    assert fields["trainer.learning_rate"].constraints == {"gt": 0, "le": 1.0}
    assert {f.name for f in view.locked} >= {"env.tokenizer_name", "infra.api_url", "wandb.entity", "environment"}
    assert "env.tokenizer_name" not in fields


@pytest.mark.parametrize(
    ("edits", "error", "text"),
    [
        ({"env.group_size": 1}, InvalidValueError, "env.group_size: Input should be greater than or equal to 2"),
        ({"env.group_size": "many"}, InvalidValueError, "env.group_size"),
        ({"env.digits": 2.5}, InvalidValueError, "env.digits"),
        ({"env.operation": "mul"}, InvalidValueError, "env.operation"),
        ({"trainer.learning_rate": 0}, InvalidValueError, "trainer.learning_rate: Input should be greater than 0"),
        ({"trainer.loss": "sgd"}, InvalidValueError, "importance_sampling"),
        ({"trainer.epsilon_high": 0.28}, InvalidValueError, "trainer.epsilon_high is a clip range, and trainer.loss"),
        ({"trainer.reference_model": "run-1"}, InvalidValueError, "trainer.reference_model is the reference of the KL"),
        ({"trainer.loss_type": "sum"}, InvalidValueError, "dr_grpo"),
        ({"group_sise": 4}, UnknownFieldError, "did you mean env.group_size"),
        ({"trainer.nope": 4}, UnknownFieldError, "unknown config field 'trainer.nope'"),
        ({"seed": 4}, UnknownFieldError, "ambiguous"),
        ({"env.tokenizer_name": "gpt2"}, LockedFieldError, "env.tokenizer_name is locked (value: 'embedded')"),
        ({"tokenizer_name": "gpt2"}, LockedFieldError, "locked"),
        ({"wandb.entity": "me"}, LockedFieldError, "wandb.entity is locked"),
        ({"infra.api_port": 1}, LockedFieldError, "infra.api_port is locked"),
        ({"env.group_size": 4, "env.digits": 99}, InvalidValueError, "env.digits"),
        ({"env.group_size": 4, "trainer.learning_rate": -1}, InvalidValueError, "trainer.learning_rate"),
        ({"trainer.learning_rate": 1e-3, "nope": 1}, UnknownFieldError, "nope"),
        ({"env.group_size": 4, "wandb.entity": "x"}, LockedFieldError, "wandb.entity"),
    ],
)
def test_a_refused_edit_changes_nothing(selected: None, edits: dict[str, Any], error: type, text: str) -> None:
    before = snapshot()
    with pytest.raises(error) as info:
        asyncio.run(api.rl_edit_config(edits))
    assert text in str(info.value)
    assert snapshot() == before


def test_all_problems_of_a_dict_edit_are_reported_at_once(selected: None) -> None:
    with pytest.raises(InvalidValueError) as info:
        edit({"env.group_size": 1, "trainer.learning_rate": -1})
    assert "env.group_size" in str(info.value)
    assert "trainer.learning_rate" in str(info.value)


def test_a_checked_apply_that_passes_validates_once_and_saves(selected: None, monkeypatch: pytest.MonkeyPatch) -> None:
    validated: list[dict[str, Any]] = []
    real_apply_edits = editing.apply_edits

    def counted(state: session.SessionState, edits: dict[str, Any]) -> Any:
        validated.append(dict(edits))
        return real_apply_edits(state, edits)

    monkeypatch.setattr(editing, "apply_edits", counted)
    outcome = service.apply_checked({"group_size": "4", "trainer.learning_rate": "1e-4"})
    assert outcome.applied is not None
    assert outcome.applied.changed == {"env.group_size": 4, "trainer.learning_rate": 1e-4}
    assert validated == [{"group_size": "4", "trainer.learning_rate": "1e-4"}]
    assert values()["env.group_size"] == 4


def test_a_checked_apply_names_each_refused_field_and_changes_nothing(selected: None) -> None:
    before = snapshot()
    outcome = service.apply_checked({"group_size": "1", "digits": "99", "trainer.learning_rate": "1e-4"})
    assert outcome.applied is None
    assert set(outcome.refused) == {"group_size", "digits"}
    assert "greater than or equal to 2" in outcome.refused["group_size"]
    assert snapshot() == before


def test_a_checked_apply_refused_by_no_single_field_says_why_once(selected: None) -> None:
    before = snapshot()
    outcome = service.apply_checked({"group_size": 4, "env.group_size": 6})
    assert (outcome.applied, outcome.refused) == (None, {})
    assert "given twice" in outcome.message
    assert snapshot() == before


def test_trainer_fields_edit_before_any_selection_env_fields_do_not() -> None:
    assert edit("trainer.learning_rate", "2e-5") == {"trainer.learning_rate": 2e-5}
    with pytest.raises(NoEnvironmentSelectedError, match="select an environment first"):
        edit("group_size", 4)
    with pytest.raises(NoEnvironmentSelectedError):
        edit("env.digits", 4)
    assert values()["trainer.learning_rate"] == 2e-5


def test_trainer_edits_survive_selecting_an_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edit("lora_rank", 8)
    write_env(tmp_path / "envs", "simple.py", SIMPLE_ENV)
    monkeypatch.setenv("HERMES_NB_ENV_PATH", str(tmp_path / "envs"))
    asyncio.run(api.rl_select_environment("simple"))
    assert values()["trainer.lora_rank"] == 8


def test_reset_returns_to_the_environment_defaults(selected: None) -> None:
    edit({"group_size": 4, "learning_rate": 1e-3, "digits": 5})
    view = asyncio.run(api.rl_reset_config())
    current = view.values()
    assert (current["env.group_size"], current["env.digits"], current["trainer.learning_rate"]) == (8, 3, 4e-5)
    assert view.environment == "simple"


def test_an_edit_to_the_same_value_reports_no_change(selected: None) -> None:
    assert edit("digits", 3) == {}


def test_quick_test_config_file_applies(selected: None) -> None:
    result = asyncio.run(api.rl_load_config("configs/quick_test.yaml"))
    assert result.changed["env.group_size"] == 4
    assert values()["env.total_steps"] == 10


def test_default_config_file_has_the_seed_defaults(selected: None) -> None:
    edit({"group_size": 4, "steps_per_eval": 3, "learning_rate": 1e-3})
    asyncio.run(api.rl_load_config("configs/default.yaml"))
    current = values()
    assert (current["env.group_size"], current["env.steps_per_eval"]) == (16, 25)
    assert current["trainer.learning_rate"] == 4e-5


def test_a_config_file_can_select_and_ignores_locked_fields(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_env(tmp_path / "envs", "simple.py", SIMPLE_ENV)
    monkeypatch.setenv("HERMES_NB_ENV_PATH", str(tmp_path / "envs"))
    path = tmp_path / "run.yaml"
    path.write_text("environment: simple\nenv:\n  digits: 5\n  tokenizer_name: other\ninfra:\n  api_port: 1\n")
    result = asyncio.run(api.rl_load_config(path))
    assert result.ignored == ["env.tokenizer_name"]
    assert values()["env.digits"] == 5
    assert asyncio.run(api.rl_get_current_config()).environment == "simple"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("env:\n  group_size: 1\ntrainer:\n  learning_rate: 1e-3\n", "env.group_size"),
        ("trainer:\n  learning_rate: 1e-3\nextra:\n  a: 1\n", "unknown section"),
        ("trainer: [1, 2]\n", "must be a mapping"),
        ("trainer:\n  learning_rate: [\n", "not valid YAML"),
        ("environment: nosuch\ntrainer:\n  learning_rate: 1e-3\n", "unknown environment 'nosuch'"),
    ],
)
def test_a_refused_config_file_changes_nothing(selected: None, tmp_path: Path, text: str, match: str) -> None:
    before = snapshot()
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(HermesNBError, match=match):
        asyncio.run(api.rl_load_config(path))
    assert snapshot() == before


def test_assignments_keep_their_values_as_text_for_the_fields_to_parse() -> None:
    parsed = parse_assignments(["group_size=8", " trainer.learning_rate =1e-4", "wandb.run_name=a=b", "seed="])
    assert parsed == {"group_size": "8", "trainer.learning_rate": "1e-4", "wandb.run_name": "a=b", "seed": ""}


@pytest.mark.parametrize("item", ["group_size", "=8", " =8"])
def test_an_assignment_without_a_field_name_and_equals_is_refused(item: str) -> None:
    with pytest.raises(HermesNBError, match=f"expected field=value .*got {item!r}"):
        parse_assignments([item])
