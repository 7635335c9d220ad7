"""The verifiers adapter without a run: discovery claims a ``vf.Taskset`` subclass without importing it, the schema
child shows the taskset's own config fields as ``taskset.*``, a Python without verifiers is refused in one line
naming it and the install command, and one without ``uv`` runs the default harness (episodes in-process) but is
refused, naming uv, before a run with verifiers' ``null`` harness (a chat program under uv per episode) starts,
and by the environment process's preparation of that program."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from side_envs import REPO_ROOT, side_env_python

from hermes_nb.api import rl_edit_config, rl_select_environment, rl_start_training
from hermes_nb.errors import EnvironmentPythonError
from hermes_nb.frameworks.verifiers import chat_program, interpreter, schema_child
from hermes_nb.selection import schema_child as generic_schema_child
from hermes_nb.selection.discovery import scan
from hermes_nb.system import home
from hermes_nb.system.side_python import env_python_environment

EXAMPLE = REPO_ROOT / "environments" / "addition_verifiers.py"
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "verifiers"
# A PATH without uv on it (and without the side venv's bin).
BARE_PATH = "/usr/bin:/bin"


@pytest.fixture
def python_without_uv(tmp_path: Path) -> Path:
    """The verifiers side venv's packages under an interpreter with no uv beside it: a venv folder of its own (its
    pyvenv.cfg, its lib linked to the side venv's), so the packages import but uv is not there."""
    side = side_env_python("verifiers").parent.parent
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(side / "bin" / "python")
    (tmp_path / "pyvenv.cfg").write_text((side / "pyvenv.cfg").read_text())
    (tmp_path / "lib").symlink_to(side / "lib")
    return tmp_path / "bin" / "python"


def test_discovery_claims_the_taskset_subclass_for_verifiers() -> None:
    environments, _ = scan([EXAMPLE.parent])
    found = {info.name: info for info in environments}
    info = found["addition_verifiers"]
    assert (info.framework, info.class_name) == ("verifiers", "AdditionTaskset")
    tools = found["calculator_verifiers"]
    assert (tools.framework, tools.class_name) == ("verifiers", "CalculatorTaskset")


def test_the_schema_child_shows_the_tasksets_fields_as_taskset_fields() -> None:
    python = side_env_python("verifiers")
    module = "hermes_nb.frameworks.verifiers.schema_child"
    done = subprocess.run(
        [str(python), "-m", module, str(EXAMPLE), "AdditionTaskset"], capture_output=True, text=True, timeout=120,
        env=env_python_environment({"PATH": "/usr/bin:/bin"}), check=True,
    )  # fmt: skip
    [line] = [line for line in done.stdout.splitlines() if line.startswith(schema_child.MARKER)]
    answer = json.loads(line[len(schema_child.MARKER) :])
    assert answer["values"]["taskset.split"] == "train"
    assert answer["json_schema"]["properties"]["taskset.split"]["enum"] == ["train", "held_out"]
    assert "taskset.id" not in answer["values"] and answer["values"]["group_size"] == 16
    assert schema_child.MARKER == generic_schema_child.MARKER


SPLITS_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
from calculator_verifiers import CalculatorConfig, CalculatorTaskset
from hermes_nb.frameworks.verifiers.schema_child import has_held_out_split
def prompts(split):
    return [task.data.prompt for task in CalculatorTaskset(CalculatorConfig(split=split, num_tasks=int(sys.argv[2])))]
print(json.dumps({"train": prompts("train"), "held_out": prompts("held_out"),
                  "has": [has_held_out_split(name) for name in ("calculator_verifiers", "broken_verifiers")]}))
"""


def test_calculator_verifiers_holds_out_calculator_agents_evaluation_items_and_is_evaluated_on_them() -> None:
    count = 20
    env = env_python_environment({"PATH": BARE_PATH, "PYTHONPATH": str(FIXTURES)})
    done = subprocess.run(
        [str(side_env_python("verifiers")), "-c", SPLITS_CHILD, str(EXAMPLE.parent), str(count)],
        capture_output=True, text=True, timeout=120, check=True, env=env,
    )  # fmt: skip
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    spec = importlib.util.spec_from_file_location(
        "adapter_test_calculator_agent", EXAMPLE.parent / "calculator_agent.py"
    )
    assert spec is not None and spec.loader is not None
    agent = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclasses look it up there
    spec.loader.exec_module(agent)
    native = agent.CalculatorAgentEnv(agent.CalculatorAgentConfig(eval_items=count))

    # The held-out tasks are calculator_agent's evaluation items in its order, so an evaluation of N items plays
    # the same problems; the training tasks are its training stream, never a held-out one.
    assert answer["held_out"] == [item.prompt for item in native.eval_items()]
    assert answer["train"] == [native.train_item().prompt for _ in range(count)]
    assert answer["has"] == [True, False]  # broken_verifiers has no split: it is not evaluated


def test_a_python_without_verifiers_is_refused_naming_it_and_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    python = str(Path(REPO_ROOT / ".venv" / "bin" / "python"))
    monkeypatch.setenv(interpreter.VERIFIERS_PYTHON_VAR, python)
    with pytest.raises(EnvironmentPythonError) as refused:
        interpreter.verifiers_python(str(EXAMPLE))
    message = str(refused.value)
    assert python in message and "pip install verifiers==0.4.0" in message and "\n" not in message


def test_a_verifiers_python_without_uv_runs_the_default_harness(
    python_without_uv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(interpreter.VERIFIERS_PYTHON_VAR, str(python_without_uv))
    monkeypatch.setenv("PATH", BARE_PATH)

    assert interpreter.verifiers_python(str(EXAMPLE)) == str(python_without_uv)


def test_a_run_with_verifiers_null_harness_and_no_uv_is_refused_before_it_starts_naming_uv(
    python_without_uv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(interpreter.VERIFIERS_PYTHON_VAR, str(python_without_uv))
    monkeypatch.setenv("PATH", BARE_PATH)
    asyncio.run(rl_select_environment("addition_verifiers"))
    asyncio.run(rl_edit_config({"env.harness": "null"}))

    with pytest.raises(EnvironmentPythonError) as refused:
        asyncio.run(rl_start_training(total_steps=1))

    message = str(refused.value)
    assert "cannot import or find uv." in message and str(python_without_uv) in message and "\n" not in message
    runs = home.home_dir() / "runs"
    assert not runs.exists() or list(runs.iterdir()) == []


def test_preparing_the_chat_program_without_uv_fails_at_once_naming_uv(python_without_uv: Path) -> None:
    done = subprocess.run(
        [str(python_without_uv), "-m", chat_program.__name__], capture_output=True, text=True, timeout=120,
        env=env_python_environment({"PATH": BARE_PATH, "HOME": str(python_without_uv.parent.parent)}),
    )  # fmt: skip
    assert done.returncode != 0
    [message] = done.stderr.strip().splitlines()
    assert "no uv is beside" in message and "pip install uv" in message


def test_an_unknown_tool_parser_is_refused_naming_the_field_and_the_parsers() -> None:
    check = "from hermes_nb.frameworks.verifiers.episode_env import _check_tool_parser; _check_tool_parser('hermes')"
    done = subprocess.run(
        [str(side_env_python("verifiers")), "-c", check], capture_output=True, text=True, timeout=120,
        env=env_python_environment({"PATH": BARE_PATH}),
    )  # fmt: skip
    assert done.returncode != 0
    assert "env.tool_parser: 'hermes' is not a renderers tool parser; accepted: " in done.stderr
    assert "qwen3" in done.stderr.splitlines()[-1]
