"""The verifiers adapter without a run: discovery claims a ``vf.Taskset`` subclass without importing it, the schema
child shows the taskset's own config fields as ``taskset.*``, and a Python without verifiers is refused in one line
naming it and the install command."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from side_envs import REPO_ROOT, side_env_python

from hermes_nb.atropos.interpreter import env_python_environment
from hermes_nb.errors import EnvironmentPythonError
from hermes_nb.frameworks.verifiers import interpreter, schema_child
from hermes_nb.selection import schema_child as generic_schema_child
from hermes_nb.selection.discovery import scan

EXAMPLE = REPO_ROOT / "environments" / "addition_verifiers.py"


def test_discovery_claims_the_taskset_subclass_for_verifiers() -> None:
    environments, _ = scan([EXAMPLE.parent])
    found = {info.name: info for info in environments}
    info = found["addition_verifiers"]
    assert (info.framework, info.class_name) == ("verifiers", "AdditionTaskset")


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


def test_a_python_without_verifiers_is_refused_naming_it_and_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    python = str(Path(REPO_ROOT / ".venv" / "bin" / "python"))
    monkeypatch.setenv(interpreter.VERIFIERS_PYTHON_VAR, python)
    with pytest.raises(EnvironmentPythonError) as refused:
        interpreter.verifiers_python(str(EXAMPLE))
    message = str(refused.value)
    assert python in message and "pip install verifiers==0.4.0" in message and "\n" not in message
