"""The async rl_* core: listing, selecting, typed results with the Hermes RL tool's keys, API keys."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from core_env_files import SIMPLE_ENV, env_class, write_env

from hermes_nb import api
from hermes_nb.errors import EnvironmentLoadError, NoEnvironmentSelectedError, UnknownEnvironmentError
from hermes_nb.results import Result


@pytest.fixture
def envs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "envs"
    write_env(directory, "simple.py", SIMPLE_ENV)
    monkeypatch.setenv("HERMES_NB_ENV_PATH", str(directory))
    return directory


def test_list_has_the_original_tool_keys(envs: Path) -> None:
    result = asyncio.run(api.rl_list_environments())
    entry = next(e for e in result.to_dict()["environments"] if e["name"] == "simple")
    assert entry == {
        "name": "simple",
        "class_name": "SimpleEnv",
        "file_path": str(envs / "simple.py"),
        "description": "Add two numbers.",
        "config_class": "SimpleConfig",
    }
    assert result.to_dict()["count"] == len(result.environments)
    assert "simple" in str(result) and "Add two numbers." in result._repr_html_()


def test_list_reports_unparsable_files(envs: Path) -> None:
    write_env(envs, "broken.py", "def (:\n")
    result = asyncio.run(api.rl_list_environments())
    assert [(Path(e.file).name, e.line) for e in result.errors] == [("broken.py", 1)]
    assert "broken.py:1" in str(result)


def test_select_unknown_name_lists_available_and_closest(envs: Path) -> None:
    with pytest.raises(UnknownEnvironmentError) as info:
        asyncio.run(api.rl_select_environment("simpel"))
    message = str(info.value)
    assert "closest: simple" in message
    assert "available:" in message and "simple" in message.split("available:")[1]


def test_select_answers_with_the_original_keys_and_sets_the_config(envs: Path) -> None:
    result = asyncio.run(api.rl_select_environment("simple"))
    data = result.to_dict()
    assert data["message"] == "Selected environment: simple"
    assert (data["environment"], data["file_path"]) == ("simple", str(envs / "simple.py"))
    config = api.current_run_config()
    assert config.environment is not None and config.environment.class_name == "SimpleEnv"
    assert config.env["digits"] == 3


def test_selecting_an_environment_whose_import_raises_changes_nothing(envs: Path) -> None:
    asyncio.run(api.rl_select_environment("simple"))
    write_env(
        envs,
        "bad.py",
        "from hermes_nb.env import BaseEnv\nimport no_such_module_xyz\n" + env_class("Bad", env_name="bad"),
    )
    with pytest.raises(EnvironmentLoadError, match="No module named 'no_such_module_xyz'"):
        asyncio.run(api.rl_select_environment("bad"))
    assert asyncio.run(api.rl_get_current_config()).environment == "simple"
    assert "no_such_module_xyz" not in sys.modules


def test_config_view_has_the_original_keys(envs: Path) -> None:
    asyncio.run(api.rl_select_environment("simple"))
    data = asyncio.run(api.rl_get_current_config()).to_dict()
    assert data["environment"] == "simple"
    group = next(f for f in data["configurable_fields"] if f["name"] == "env.group_size")
    assert {"name", "type", "default", "description", "current_value", "constraints"} <= set(group)
    assert group["current_value"] == 8
    locked = next(f for f in data["locked_fields"] if f["name"] == "env.tokenizer_name")
    assert locked["locked_value"] == "embedded"
    json.dumps(data)


def test_edit_answers_with_the_original_keys(envs: Path) -> None:
    asyncio.run(api.rl_select_environment("simple"))
    data = asyncio.run(api.rl_edit_config("group_size", "4")).to_dict()
    assert data["message"] == "Updated env.group_size = 4"
    assert (data["field"], data["value"]) == ("env.group_size", 4)
    assert data["config"]["env.group_size"] == 4


def test_current_run_config_needs_a_selection() -> None:
    with pytest.raises(NoEnvironmentSelectedError):
        api.current_run_config()
    assert api.current_run_config(require_environment=False).trainer.learning_rate == 4e-5


def test_state_is_shared_with_a_fresh_reader_of_the_session_file(envs: Path) -> None:
    from hermes_nb.selection import session

    asyncio.run(api.rl_select_environment("simple"))
    asyncio.run(api.rl_edit_config("digits", 5))
    on_disk = session.SessionState.model_validate_json(session.session_path().read_text())
    assert on_disk.config.env["digits"] == 5
    assert on_disk.environment is not None and on_disk.environment.name == "simple"


@pytest.fixture
def fresh_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from hermes_nb.selection import current

    monkeypatch.setattr(current, "_STARTED", type(current._STARTED)())


def test_keys_are_read_from_home_env_without_overriding(
    envs: Path, hermes_home: Path, fresh_start: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    (hermes_home / ".env").write_text("TINKER_API_KEY=tk-from-file-123\nWANDB_API_KEY=wb-from-file-456\n")
    monkeypatch.setenv("WANDB_API_KEY", "wb-already-set-789")
    asyncio.run(api.rl_list_environments())
    assert os.environ["TINKER_API_KEY"] == "tk-from-file-123"
    assert os.environ["WANDB_API_KEY"] == "wb-already-set-789"


def test_keys_never_appear_in_any_result(
    envs: Path, hermes_home: Path, fresh_start: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "tk-very-secret-value-42"
    (hermes_home / ".env").write_text(f"TINKER_API_KEY={secret}\n")
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    results: list[Result] = [
        asyncio.run(api.rl_list_environments()),
        asyncio.run(api.rl_select_environment("simple")),
        # A user pasting a key into a field must not get it echoed back either.
        asyncio.run(api.rl_edit_config("wandb.run_name", secret)),
        asyncio.run(api.rl_get_current_config()),
        asyncio.run(api.rl_reset_config()),
    ]
    assert os.environ["TINKER_API_KEY"] == secret
    for result in results:
        for form in (str(result), result._repr_html_(), json.dumps(result.to_dict())):
            assert secret not in form
