"""Reading an environment's config schema in a child process: values, constraints, failures, cache."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from core_env_files import SIMPLE_ENV, env_class, write_env

from hermes_nb.errors import EnvironmentLoadError
from hermes_nb.selection import schema

HEADER = "from hermes_nb.env import BaseEnv\n"


@pytest.fixture(autouse=True)
def _fresh_memory_cache() -> None:
    schema.clear_memory_cache()


def test_schema_has_config_init_values_constraints_and_servers(tmp_path: Path) -> None:
    path = write_env(tmp_path, "simple.py", SIMPLE_ENV)
    result = schema.read_schema_sync(str(path), "SimpleEnv")
    assert result.config_class == "SimpleConfig"
    assert result.values["group_size"] == 8  # config_init's value, not the class default
    assert result.values["digits"] == 3
    props = result.json_schema["properties"]
    assert props["group_size"]["minimum"] == 2
    assert props["digits"]["description"] == "Operands have at most this many digits."
    assert result.server_configs[0]["model_name"] == "policy-x"


def test_import_error_gives_a_clear_error_with_the_traceback_tail(tmp_path: Path) -> None:
    source = HEADER + "raise RuntimeError('dataset missing: /data/x.jsonl')\n" + env_class("Broken")
    path = write_env(tmp_path, "broken.py", source)
    with pytest.raises(EnvironmentLoadError) as info:
        schema.read_schema_sync(str(path), "Broken")
    message = str(info.value)
    assert message.splitlines()[0].startswith(f"importing Broken in {path} failed")
    assert "RuntimeError: dataset missing: /data/x.jsonl" in message
    assert "Traceback" in message or "broken.py" in message
    # This process never imported the environment's module.
    assert not [name for name in sys.modules if name.endswith("_broken")]


def test_a_crash_in_the_child_leaves_this_process_working(tmp_path: Path) -> None:
    path = write_env(tmp_path, "crash.py", "import os\nos._exit(7)\n")
    with pytest.raises(EnvironmentLoadError, match="exit code 7"):
        schema.read_schema_sync(str(path), "Crash")
    ok = write_env(tmp_path, "simple.py", SIMPLE_ENV)
    assert schema.read_schema_sync(str(ok), "SimpleEnv").values["digits"] == 3


def test_a_hanging_import_times_out(tmp_path: Path) -> None:
    path = write_env(tmp_path, "hang.py", "import time\ntime.sleep(60)\n")
    start = time.monotonic()
    with pytest.raises(EnvironmentLoadError, match="timed out after 1 s"):
        schema.read_schema_sync(str(path), "Hang", timeout=1.0)
    assert time.monotonic() - start < 10


def test_missing_class_is_a_load_error(tmp_path: Path) -> None:
    path = write_env(tmp_path, "simple.py", SIMPLE_ENV)
    with pytest.raises(EnvironmentLoadError, match="defines no class Nope"):
        schema.read_schema_sync(str(path), "Nope")


def test_prints_of_the_environment_do_not_break_the_answer(tmp_path: Path) -> None:
    path = write_env(tmp_path, "loud.py", "print('hello from the environment')\n" + SIMPLE_ENV)
    assert schema.read_schema_sync(str(path), "SimpleEnv").values["group_size"] == 8


def test_keys_are_not_given_to_the_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINKER_API_KEY", "tk-secret-123")
    source = SIMPLE_ENV.replace(
        "return SimpleConfig(group_size=8, digits=3)",
        "import os\n        return SimpleConfig(group_size=8, label=os.environ.get('TINKER_API_KEY', 'absent'))",
    )
    path = write_env(tmp_path, "peek.py", source)
    assert schema.read_schema_sync(str(path), "SimpleEnv").values["label"] == "absent"


def test_cached_by_content_in_memory_and_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_env(tmp_path, "simple.py", SIMPLE_ENV)
    children: list[str] = []
    real = schema._run_child

    def counting(*args: Any) -> schema.EnvSchema:
        children.append(args[0])
        return real(*args)

    monkeypatch.setattr(schema, "_run_child", counting)
    first = schema.read_schema_sync(str(path), "SimpleEnv")
    assert schema.read_schema_sync(str(path), "SimpleEnv") == first
    schema.clear_memory_cache()
    assert schema.read_schema_sync(str(path), "SimpleEnv") == first  # from <home>/cache
    assert len(children) == 1
    path.write_text(path.read_text().replace("digits=3", "digits=4"))
    assert schema.read_schema_sync(str(path), "SimpleEnv").values["digits"] == 4
    assert len(children) == 2
