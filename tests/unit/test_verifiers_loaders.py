"""A verifiers environment package that exports only a ``load_environment`` (or ``load_taskset``) function, no
``vf.Taskset`` subclass, as the packages of verifiers' own ``environments/`` folder do: listed by its id, saying
why it cannot run, and refused when selected, since verifiers 0.4.0 itself loads an environment only as the
Taskset subclass its package exports (checked here in the verifiers Python, as ``vf-eval`` loads one)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
from side_envs import side_env_python

from hermes_nb import api
from hermes_nb.errors import EnvironmentLoadError
from hermes_nb.selection import current, discovery

# verifiers' environments/ layout: a project folder, its pyproject naming the id, one module of the id's name.
PYPROJECT = """\
[project]
name = "{env_id}"
version = "0.1.0"
dependencies = ["verifiers>=0.4"]
"""
LOADER_MODULE = '''\
"""Sort names alphabetically, over several turns."""

import verifiers as vf


def load_environment(max_turns: int = 3, **env_args) -> vf.Environment:
    dataset = [{"prompt": [{"role": "user", "content": "Sort: b, a"}], "answer": "a, b"}]
    rubric = vf.Rubric(funcs=[lambda completion, answer, **kw: float(answer in str(completion))])
    return vf.MultiTurnEnv(dataset=dataset, rubric=rubric, max_turns=max_turns)
'''
TASKSET_LOADER_INIT = """\
from verifiers.v1 import TasksetConfig

from .data import rows


def load_taskset(config: TasksetConfig | None = None):
    return rows(config)
"""


def _loader_project(parent: Path, env_id: str) -> Path:
    project = parent / env_id.replace("-", "_")
    project.mkdir(parents=True)
    (project / "pyproject.toml").write_text(PYPROJECT.format(env_id=env_id), encoding="utf-8")
    (project / f"{project.name}.py").write_text(LOADER_MODULE, encoding="utf-8")
    return project


def _listed(path: Path) -> dict[str, discovery.EnvironmentInfo]:
    environments, problems = discovery.scan([path])
    assert problems == []
    return {e.name: e for e in environments}


def test_a_package_exporting_only_load_environment_is_listed_by_its_id_saying_why_it_cannot_run(
    tmp_path: Path,
) -> None:
    _loader_project(tmp_path, "legacy-sort")

    info = _listed(tmp_path)["legacy-sort"]

    assert (info.framework, info.class_name) == ("verifiers", "load_environment")
    assert "verifiers 0.4.0 loads an environment only as the vf.Taskset subclass" in info.unsupported
    assert info.description == "Sort names alphabetically, over several turns."


def test_a_package_whose_init_exports_only_load_taskset_is_listed_by_its_id(tmp_path: Path) -> None:
    package = tmp_path / "rows_task" / "rows_task"
    package.mkdir(parents=True)
    (package.parent / "pyproject.toml").write_text(PYPROJECT.format(env_id="rows-task"), encoding="utf-8")
    (package / "__init__.py").write_text(TASKSET_LOADER_INIT, encoding="utf-8")
    (package / "data.py").write_text("def rows(config):\n    return []\n", encoding="utf-8")

    info = _listed(tmp_path)["rows-task"]

    assert (info.class_name, Path(info.file).name) == ("load_taskset", "__init__.py")
    assert info.unsupported


def test_selecting_it_refuses_saying_why_and_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _loader_project(tmp_path, "legacy-sort")
    monkeypatch.setenv("HERMES_NB_ENV_PATH", str(tmp_path))

    with pytest.raises(EnvironmentLoadError, match=r"'legacy-sort' \(package .*\) cannot run here: it exports only"):
        asyncio.run(api.rl_select_environment("legacy-sort"))
    assert current.current_state().environment is None
    assert "cannot run here: it exports only" in str(asyncio.run(api.rl_list_environments()))


V1_LOADER_MODULE = """\
import verifiers.v1 as vf


def load_environment(**env_args):
    return vf.load_environment(vf.resolve_env_config({"taskset": {"id": "peer-addition"}}))
"""
# Loads each id as vf-eval does and prints what verifiers answers, one line each.
LOAD_EACH = """
import sys, verifiers.v1 as vf
sys.path[:0] = sys.argv[1:]
for env_id in ("legacy-sort", "v1-loader"):
    try:
        vf.load_environment(vf.resolve_env_config({"taskset": {"id": env_id}}))
        print(env_id, "loaded")
    except Exception as exc:
        print(env_id, type(exc).__name__, str(exc).splitlines()[0])
"""


def test_verifiers_itself_refuses_to_load_either_by_its_id(tmp_path: Path) -> None:
    legacy = _loader_project(tmp_path, "legacy-sort")
    v1 = _loader_project(tmp_path, "v1-loader")
    (v1 / "v1_loader.py").write_text(V1_LOADER_MODULE, encoding="utf-8")
    python = str(side_env_python("verifiers"))
    done = subprocess.run([python, "-c", LOAD_EACH, str(legacy), str(v1)], capture_output=True, text=True, timeout=90)

    assert done.returncode == 0, done.stderr
    older, newer = done.stdout.strip().splitlines()
    # The older API's classes are gone from verifiers 0.4.0; a loader on its current API has no Taskset to load.
    assert older.startswith("legacy-sort AttributeError") and "no attribute 'Environment'" in older
    assert newer.startswith("v1-loader AttributeError") and "must export its Taskset subclass" in newer
