"""Environment discovery: AST scan, never importing, across files, cached per file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from core_env_files import SIMPLE_ENV, env_class, write_env

from hermes_nb.selection import discovery

HEADER = "from hermes_nb.env import BaseEnv\n\n"


def names(tmp: Path) -> dict[str, discovery.EnvironmentInfo]:
    environments, _ = discovery.scan([tmp])
    return {e.name: e for e in environments}


def test_direct_subclass_is_listed_with_its_entry(tmp_path: Path) -> None:
    path = write_env(tmp_path, "simple.py", SIMPLE_ENV)
    (info,) = discovery.scan([tmp_path])[0]
    assert info.name == "simple"
    assert info.class_name == "SimpleEnv"
    assert info.file == str(path)
    assert info.description == "Add two numbers."
    assert info.config_class == "SimpleConfig"


def test_name_defaults_to_file_stem_and_description_to_module_docstring(tmp_path: Path) -> None:
    write_env(tmp_path, "my_task.py", '"""Module line one.\n\nmore"""\n' + HEADER + env_class("Task"))
    info = names(tmp_path)["my_task"]
    assert info.description == "Module line one."
    assert info.config_class == "BaseEnvConfig"


def test_indirect_subclass_through_a_class_in_another_file(tmp_path: Path) -> None:
    write_env(tmp_path, "_base_math.py", HEADER + "class MathBase(BaseEnv):\n    env_config_cls = MathConfig\n")
    write_env(tmp_path, "adder.py", "from _base_math import MathBase\n\n" + env_class("Adder", "MathBase", "adder"))
    found = names(tmp_path)
    assert found["adder"].class_name == "Adder"
    assert found["adder"].config_class == "MathConfig"  # inherited from the scanned parent


def test_indirect_subclass_in_the_same_file_and_abstract_bases_are_skipped(tmp_path: Path) -> None:
    source = HEADER + "import abc\n\nclass Mid(BaseEnv, abc.ABC):\n    pass\n\n" + env_class("Leaf", "Mid", "leaf")
    write_env(tmp_path, "chain.py", source)
    assert list(names(tmp_path)) == ["leaf"]


@pytest.mark.parametrize(
    ("imports", "base"),
    [
        ("from atroposlib.envs.base import BaseEnv", "BaseEnv"),
        ("from atroposlib.envs.base import BaseEnv as AtroposEnv", "AtroposEnv"),
        ("import atroposlib.envs.base as b", "b.BaseEnv"),
        ("import atroposlib.envs.base", "atroposlib.envs.base.BaseEnv"),
        ("from hermes_nb import env as hn", "hn.BaseEnv"),
        ("from hermes_nb.env import BaseEnv as E", "E"),
        ("from hermes_nb.env import QAEnv", "QAEnv"),
        ("from hermes_nb.env import AgentEnv", "AgentEnv"),
    ],
)
def test_import_forms_of_base_env_are_recognised(tmp_path: Path, imports: str, base: str) -> None:
    write_env(tmp_path, "form.py", f"{imports}\n\n" + env_class("FormEnv", base, "form"))
    assert names(tmp_path)["form"].class_name == "FormEnv"


def test_unrelated_classes_are_not_environments(tmp_path: Path) -> None:
    write_env(tmp_path, "other.py", "class Helper(dict):\n    pass\n\nclass Config:\n    pass\n")
    assert names(tmp_path) == {}


def test_syntax_error_is_listed_with_file_and_line_and_the_scan_goes_on(tmp_path: Path) -> None:
    broken = write_env(tmp_path, "broken.py", "x = 1\n\nclass Oops(BaseEnv)\n    pass\n")
    write_env(tmp_path, "simple.py", SIMPLE_ENV)
    environments, errors = discovery.scan([tmp_path])
    assert [e.name for e in environments] == ["simple"]
    (error,) = errors
    assert error.file == str(broken)
    assert error.line == 3
    assert "syntax" in error.message


def test_scanning_never_imports_the_file(tmp_path: Path) -> None:
    marker = tmp_path / "imported.marker"
    source = f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n" + HEADER
    write_env(tmp_path / "envs", "hostile.py", source + env_class("Hostile", env_name="hostile"))
    assert "hostile" in names(tmp_path / "envs")
    assert not marker.exists()


def test_a_file_added_after_the_first_scan_is_found(tmp_path: Path) -> None:
    write_env(tmp_path, "simple.py", SIMPLE_ENV)
    assert list(names(tmp_path)) == ["simple"]
    write_env(tmp_path, "later.py", HEADER + env_class("Later", env_name="later"))
    assert sorted(names(tmp_path)) == ["later", "simple"]


def test_a_changed_file_is_seen_and_a_deleted_one_is_gone(tmp_path: Path) -> None:
    path = write_env(tmp_path, "task.py", HEADER + env_class("Task", env_name="before"))
    assert list(names(tmp_path)) == ["before"]
    write_env(tmp_path, "task.py", HEADER + env_class("Task", env_name="after_edit"))
    assert list(names(tmp_path)) == ["after_edit"]
    path.unlink()
    assert names(tmp_path) == {}


def test_an_unchanged_tree_is_not_parsed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(3):
        write_env(tmp_path, f"env_{i}.py", HEADER + env_class(f"E{i}"))
    discovery.scan([tmp_path])
    parsed: list[str] = []
    real = discovery.scan_file

    def counting(path: str) -> discovery.FileScan:
        parsed.append(path)
        return real(path)

    monkeypatch.setattr(discovery, "scan_file", counting)
    discovery.scan([tmp_path])
    assert parsed == []
    changed = tmp_path / "env_1.py"
    changed.write_text(changed.read_text() + "\n# edited\n")
    discovery.scan([tmp_path])
    assert parsed == [str(changed)]


def test_one_name_in_two_folders_lists_both_marked_shared(tmp_path: Path) -> None:
    write_env(tmp_path / "a", "one.py", HEADER + env_class("One", env_name="dup"))
    write_env(tmp_path / "b", "two.py", HEADER + env_class("Two", env_name="dup"))
    environments, errors = discovery.scan([tmp_path / "a", tmp_path / "b"])
    assert [(e.name, e.class_name, e.shared) for e in environments] == [("dup", "One", True), ("dup", "Two", True)]
    assert errors == []


def test_missing_directories_and_underscore_files_are_skipped(tmp_path: Path) -> None:
    write_env(tmp_path, "__init__.py", HEADER + env_class("Hidden", env_name="hidden"))
    assert discovery.scan([tmp_path, tmp_path / "nope"]) == ([], [])


def test_search_path_includes_hermes_nb_env_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_env(tmp_path / "x", "simple.py", SIMPLE_ENV)
    write_env(tmp_path / "y", "other.py", HEADER + env_class("Other", env_name="other_env"))
    monkeypatch.setenv("HERMES_NB_ENV_PATH", os.pathsep.join([str(tmp_path / "x"), str(tmp_path / "y")]))
    found = {e.name for e in discovery.scan()[0]}
    assert {"simple", "other_env"} <= found
