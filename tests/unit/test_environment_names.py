"""Two environments that would share a name are both listed, each with where it comes from (the listing, the
tool's answer, the CLI, the picker); the bare name refuses, naming each one's qualified name ``NAME@WHERE`` (the
folder or file it comes from), and the qualified name selects exactly that one. Real files: environment files in
two folders, and a ``vf-init`` project on the path beside a package of the same id installed into a Python."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from core_env_files import SIMPLE_ENV, write_env
from scaffolds import addition_vf

from hermes_nb import api
from hermes_nb.cli import main
from hermes_nb.errors import AmbiguousEnvironmentError, UnknownEnvironmentError
from hermes_nb.frameworks.verifiers.interpreter import VERIFIERS_PYTHON_VAR
from hermes_nb.notebook.widgets.picker import EnvironmentPicker
from hermes_nb.selection import current, discovery, installed, service


@pytest.fixture
def two_simple(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """``simple`` (SIMPLE_ENV's name) in two folders, both on the environments path."""
    first = write_env(tmp_path / "mine", "simple.py", SIMPLE_ENV)
    second = write_env(tmp_path / "theirs", "simple.py", SIMPLE_ENV)
    monkeypatch.setenv("HERMES_NB_ENV_PATH", f"{first.parent}:{second.parent}")
    return first, second


def _called(name: str) -> list[discovery.EnvironmentInfo]:
    return [e for e in asyncio.run(api.rl_list_environments()).environments if e.name == name]


def test_two_files_giving_one_name_are_both_listed_each_with_its_file(two_simple: tuple[Path, Path]) -> None:
    listed = _called("simple")

    assert [(e.file, e.shared, e.source) for e in listed] == [(str(f), True, f"file {f}") for f in two_simple]
    assert [e.qualified_name for e in listed] == [f"simple@{f.resolve()}" for f in two_simple]


def test_the_bare_shared_name_refuses_naming_each_qualified_name_and_changes_nothing(
    two_simple: tuple[Path, Path],
) -> None:
    with pytest.raises(AmbiguousEnvironmentError) as refused:
        asyncio.run(api.rl_select_environment("simple"))

    message = str(refused.value)
    assert "2 environments are called 'simple'" in message and "NAME@WHERE" in message
    assert all(f"simple@{f.resolve()} (file {f})" in message for f in two_simple)
    assert current.current_state().environment is None


def test_a_qualified_name_selects_that_one_by_its_file_or_a_relative_path(
    two_simple: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two_simple
    selected = asyncio.run(api.rl_select_environment(f"simple@{second}"))
    assert selected.environment.file == str(second)

    monkeypatch.chdir(first.parent.parent)
    asyncio.run(api.rl_select_environment("simple@mine/simple.py"))
    state = current.current_state()
    assert state.environment is not None and state.environment.file == str(first)
    assert state.config.env["digits"] == 3  # its own config_init() was read


def test_a_qualified_name_from_a_folder_none_comes_from_refuses_naming_the_choices(
    two_simple: tuple[Path, Path], tmp_path: Path
) -> None:
    with pytest.raises(UnknownEnvironmentError, match=r"no environment 'simple' comes from .*simple@") as refused:
        asyncio.run(api.rl_select_environment(f"simple@{tmp_path / 'elsewhere'}"))
    assert not isinstance(refused.value, AmbiguousEnvironmentError)


def test_a_name_no_other_shares_is_selected_bare_and_listed_as_before(tmp_path: Path) -> None:
    file = write_env(tmp_path, "simple.py", SIMPLE_ENV)
    [info] = [e for e in discovery.scan([tmp_path])[0] if e.name == "simple"]

    assert (info.shared, info.selector, info.source) == (False, "simple", f"file {file}")


def test_the_listing_text_html_and_tool_answer_show_where_each_comes_from(two_simple: tuple[Path, Path]) -> None:
    listing = asyncio.run(api.rl_list_environments())
    text, page = str(listing), listing._repr_html_()
    entries = [e for e in listing.to_dict()["environments"] if e["name"] == "simple"]

    for file in two_simple:
        assert f"from file {file}: select as simple@{file.resolve()}" in text
        assert f"simple@{file.resolve()}" in page and f"file {file}" in page
    assert [(e["source"], e["select_as"]) for e in entries] == [
        (f"file {f}", f"simple@{f.resolve()}") for f in two_simple
    ]


def test_the_cli_lists_both_and_selects_by_the_qualified_name(
    two_simple: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert all(f"select as simple@{f.resolve()}" in listed for f in two_simple)

    assert main(["select", "simple"]) == 2
    assert "NAME@WHERE" in capsys.readouterr().err
    assert main(["select", f"simple@{two_simple[1]}"]) == 0
    state = current.current_state()
    assert state.environment is not None and state.environment.file == str(two_simple[1])


def test_the_picker_offers_each_by_its_qualified_name_and_selects_it(two_simple: tuple[Path, Path]) -> None:
    picker = EnvironmentPicker()
    picker.filter.value = "simple"

    assert picker.shown == [f"simple@{f.resolve()}" for f in two_simple]
    picker.list.value = f"simple@{two_simple[1].resolve()}"
    state = current.current_state()
    assert state.environment is not None and state.environment.file == str(two_simple[1])


def test_one_file_giving_one_name_twice_keeps_the_first_and_reports_the_second(tmp_path: Path) -> None:
    header = "from hermes_nb.env import BaseEnv\n\n"
    body = "    name = 'dup'\n    async def get_next_item(self):\n        raise NotImplementedError\n"
    write_env(tmp_path, "both.py", header + f"class One(BaseEnv):\n{body}\n\nclass Two(BaseEnv):\n{body}")

    environments, problems = discovery.scan([tmp_path])

    assert [(e.name, e.class_name, e.shared) for e in environments] == [("dup", "One", False)]
    assert "already used by One" in problems[0].message


def _installed_by_hand(package: Path, distribution: str, venv: Path) -> Path:
    """A Python into which ``package`` is installed as pip installs a wheel of it: the package's folder in
    site-packages beside a dist-info naming the distribution, its requirement on verifiers and its files."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    probe = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = Path(subprocess.run([python, "-c", probe], check=True, capture_output=True, text=True).stdout.strip())
    shutil.copytree(package, purelib / package.name)
    dist_info = purelib / f"{distribution.replace('-', '_')}-0.1.0.dist-info"
    dist_info.mkdir()
    metadata = f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1.0\nRequires-Dist: verifiers>=0.4\n"
    (dist_info / "METADATA").write_text(metadata, encoding="utf-8")
    files = sorted(p.relative_to(purelib) for p in (purelib / package.name).rglob("*.py"))
    (dist_info / "RECORD").write_text("".join(f"{f},,\n" for f in files), encoding="utf-8")
    return python


def test_a_project_on_the_path_and_an_installed_package_of_one_id_are_both_listed_and_each_selected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_path = addition_vf(tmp_path / "projects", "peer-addition")
    python = _installed_by_hand(on_path / "peer_addition", "peer-addition", tmp_path / "venv")
    monkeypatch.setenv(VERIFIERS_PYTHON_VAR, str(python))
    monkeypatch.setenv("HERMES_NB_ENV_PATH", str(tmp_path / "projects"))
    installed.clear_cache()

    listed = _called("peer-addition")

    assert listed[0].source == f"package {on_path}"
    assert listed[1].source.startswith(f"installed into {python} (")
    assert all(e.shared and e.framework == "verifiers" for e in listed)
    assert "site-packages" in listed[1].origin
    with pytest.raises(AmbiguousEnvironmentError, match="installed into"):
        service.find_environment("peer-addition")
    assert service.find_environment(f"peer-addition@{on_path}").file == listed[0].file
    assert service.find_environment(listed[1].qualified_name).file == listed[1].file
