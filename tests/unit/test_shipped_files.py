"""The shipped environments, configs and example notebooks, found through the package (never the working directory),
and the commands that reach them by name: a config by its name, the notebooks copied out.

tests/e2e/test_wheel_install.py checks the same from a wheel installed into another virtual environment.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from core_env_files import SIMPLE_ENV, write_env
from IPython.core.interactiveshell import InteractiveShell

from hermes_nb import api
from hermes_nb.errors import ConfigError, HermesNBError
from hermes_nb.selection.examples import copy_examples
from hermes_nb.system import home

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def simple_selected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_env(tmp_path / "envs", "simple.py", SIMPLE_ENV)
    monkeypatch.setenv("HERMES_NB_ENV_PATH", str(tmp_path / "envs"))
    asyncio.run(api.rl_select_environment("simple"))


def test_a_clone_reads_its_own_folders_through_the_package() -> None:
    shipped = Path(str(resources.files("hermes_nb") / "_shipped"))
    assert home.shipped_environments_dir() == (shipped / "environments").resolve() == REPO_ROOT / "environments"
    assert home.shipped_configs_dir() == REPO_ROOT / "configs"
    assert home.shipped_notebooks_dir() == REPO_ROOT / "notebooks"


def test_the_shipped_config_names_are_the_configs_file_stems() -> None:
    assert "quickstart" in home.shipped_config_names()
    assert home.shipped_config_names() == sorted(p.stem for p in (REPO_ROOT / "configs").glob("*.yaml"))


def test_a_shipped_config_loads_by_name_from_another_directory(
    simple_selected: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    loaded = asyncio.run(api.rl_load_config("quick_test"))
    assert loaded.changed["env.group_size"] == 4
    assert loaded.source == "quick_test"


def test_a_file_beside_the_user_wins_over_a_shipped_config_of_that_name(
    simple_selected: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quick_test").write_text("env:\n  group_size: 2\n", encoding="utf-8")
    assert asyncio.run(api.rl_load_config("quick_test")).changed["env.group_size"] == 2


def test_an_unknown_config_name_is_refused_listing_the_shipped_names(
    simple_selected: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="'quickstrat' is neither a file nor a shipped config") as caught:
        asyncio.run(api.rl_load_config("quickstrat"))
    assert all(name in str(caught.value) for name in home.shipped_config_names())
    assert asyncio.run(api.rl_get_current_config()).values()["env.group_size"] == 8  # nothing changed


def test_the_load_magic_takes_a_shipped_config_name(simple_selected: None) -> None:
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "hermes_nb")
    assert ip.run_line_magic("rl_load", "quick_test").changed["env.group_size"] == 4


def test_the_cli_loads_a_shipped_config_by_name(simple_selected: None, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    loaded = subprocess.run(
        [sys.executable, "-m", "hermes_nb.cli", "load", "quick_test"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr
    assert "env.group_size: 8 -> 4" in loaded.stdout


def test_examples_copies_every_notebook_into_a_new_directory(tmp_path: Path) -> None:
    copied = asyncio.run(copy_examples(tmp_path / "mine"))
    expected = sorted(p.name for p in (REPO_ROOT / "notebooks").glob("*.ipynb"))
    assert copied.notebooks == expected and "quickstart.ipynb" in expected
    for name in expected:
        assert (tmp_path / "mine" / name).read_bytes() == (REPO_ROOT / "notebooks" / name).read_bytes()


def test_examples_refuses_a_directory_with_one_of_the_notebooks_and_copies_nothing(tmp_path: Path) -> None:
    (tmp_path / "quickstart.ipynb").write_text("mine", encoding="utf-8")
    with pytest.raises(HermesNBError, match="already has quickstart.ipynb"):
        asyncio.run(copy_examples(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quickstart.ipynb"]
    assert (tmp_path / "quickstart.ipynb").read_text(encoding="utf-8") == "mine"
