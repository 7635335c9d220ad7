"""Another Python runs this: the package link a foreign interpreter imports ``hermes_nb`` through, and the base a
side-Python framework extends, shown by the toy framework as one (tests/fixtures/frameworks/toy_framework/
side_adapter.py)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from hermes_nb.config import EnvironmentRef, RunConfig
from hermes_nb.errors import EnvironmentPythonError
from hermes_nb.frameworks.contract import ModelTestRequest, ServeRequest
from hermes_nb.system import home
from hermes_nb.system.home import run_paths
from hermes_nb.system.side_python import env_python_environment, import_root

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "frameworks"
ENV_FILE = str(FIXTURES / "envs" / "toy_double.py")


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The toy side-Python framework (defined outside the package), its interpreter this one."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setenv("PYTHONPATH", str(FIXTURES))  # where the probe finds toy_framework
    module = importlib.import_module("toy_framework.side_adapter")
    monkeypatch.setenv(module.TOY_PYTHON.variable, sys.executable)
    return module


def toy_config() -> RunConfig:
    ref = EnvironmentRef(name="toy_double", file=ENV_FILE, class_name="DoubleEnv", framework="toy_side")
    return RunConfig(environment=ref, trainer={"backend": "local"})


def test_a_foreign_interpreter_sees_the_hermes_nb_package_and_nothing_else_of_this_venv() -> None:
    env = env_python_environment({"PYTHONPATH": "/user/path"})

    root, rest = env["PYTHONPATH"].split(os.pathsep)
    assert rest == "/user/path"
    assert [p.name for p in Path(root).iterdir()] == ["hermes_nb"]
    assert (Path(root) / "hermes_nb").resolve() == home.PACKAGE_DIR
    assert env["PYTHONUNBUFFERED"] == "1"


def test_a_side_python_that_imports_the_framework_is_used(toy: ModuleType) -> None:
    assert toy.ADAPTER.python(ENV_FILE) == sys.executable
    assert toy.ADAPTER.configured_python() == sys.executable
    assert toy.ADAPTER.described("toy_double") == f"toy_double (toy; run by {sys.executable})"


def test_a_side_python_without_the_framework_is_refused_with_how_to_install_it(
    toy: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    python = tmp_path / "python"  # another interpreter (by path: probed anew), with the fixtures off its path
    python.symlink_to(sys.executable)
    monkeypatch.delenv("PYTHONPATH")
    monkeypatch.setenv(toy.TOY_PYTHON.variable, str(python))

    with pytest.raises(EnvironmentPythonError) as raised:
        toy.ADAPTER.python(ENV_FILE)

    message = str(raised.value)
    assert f"the toy Python {python} cannot import toy_framework" in message
    assert "pip install toy_framework" in message and "HERMES_NB_TOY_PYTHON=~/.venvs/toy/bin/python" in message


def test_a_side_python_framework_serves_its_episode_class_with_the_file_and_its_own_variables(
    toy: ModuleType, tmp_path: Path
) -> None:
    paths = run_paths("20260101-000000-aaaaaaaaaa").model_copy(update={"run_dir": tmp_path})
    request = ServeRequest(config=toy_config(), paths=paths, base_environment={"PATH": "/usr/bin"})

    command = toy.ADAPTER.serve(request)

    assert command.argv == request.host_argv(sys.executable, toy.ADAPTER.episode_env_spec)
    assert command.environment[toy.FILE_VAR] == ENV_FILE
    assert command.environment[toy.MODE_VAR] == "train"
    assert command.environment["PYTHONPATH"].split(os.pathsep)[0] == str(import_root())
    assert command.environment["PATH"] == "/usr/bin"


def test_a_side_python_framework_tests_a_model_with_the_same_class_in_the_checked_python(
    toy: ModuleType, tmp_path: Path
) -> None:
    request = ModelTestRequest(
        config=toy_config(), config_path=tmp_path / "config.json", python="/venvs/toy/bin/python",
        base_environment={}, num_groups=2, group_size=4, model_url="http://127.0.0.1:1/v1", model_name=None,
        local=True, output=tmp_path / "groups.jsonl", stem=tmp_path / "test",
    )  # fmt: skip

    command = toy.ADAPTER.model_test(request)

    assert command.argv == request.host_argv(toy.ADAPTER.episode_env_spec)
    assert command.argv[0] == "/venvs/toy/bin/python"
    assert command.environment[toy.FILE_VAR] == ENV_FILE
    assert command.environment[toy.MODE_VAR] == "test"
