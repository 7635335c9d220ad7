"""scripts/link_duplicates.py: what several virtual environments repeat is stored once, and nothing else moves."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "link_duplicates.py"


def min_size() -> int:
    spec = importlib.util.spec_from_file_location("link_duplicates", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return int(module.MIN_SIZE)


BIG = min_size()  # smaller files are left alone


def link(*folders: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, folders)], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout


def write(path: Path, content: bytes, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    path.chmod(mode)
    return path


def same_file(a: Path, b: Path) -> bool:
    return os.path.samefile(a, b)


@pytest.fixture
def venvs(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "venv-a", tmp_path / "venv-b"


def test_an_identical_library_in_two_venvs_becomes_one_file(venvs: tuple[Path, Path]) -> None:
    a, b = venvs
    content = os.urandom(3 * BIG)
    first = write(a / "lib" / "torch" / "libtorch.so", content, 0o755)
    second = write(b / "lib" / "torch" / "libtorch.so", content, 0o755)

    report = link(a, b)

    assert same_file(first, second)
    assert second.read_bytes() == content
    assert os.stat(second).st_mode & 0o777 == 0o755
    assert "1 files linked" in report


def test_the_space_saved_is_reported(venvs: tuple[Path, Path]) -> None:
    a, b = venvs
    content = os.urandom(16 * BIG)  # 1 MiB
    write(a / "x.so", content)
    write(b / "x.so", content)
    write(b / "y.so", content)

    assert "2 files linked, 2 MiB saved" in link(a, b)


def test_files_that_differ_in_content_stay_apart(venvs: tuple[Path, Path]) -> None:
    a, b = venvs
    first = write(a / "x.so", b"a" * BIG)
    second = write(b / "x.so", b"b" * BIG)

    link(a, b)

    assert not same_file(first, second)
    assert (first.read_bytes(), second.read_bytes()) == (b"a" * BIG, b"b" * BIG)


def test_files_that_differ_in_mode_stay_apart(venvs: tuple[Path, Path]) -> None:
    a, b = venvs
    content = os.urandom(BIG)
    executable = write(a / "tool", content, 0o755)
    data = write(b / "tool", content, 0o644)

    link(a, b)

    assert not same_file(executable, data)
    assert os.stat(data).st_mode & 0o777 == 0o644


def test_python_sources_and_small_files_are_left_alone(venvs: tuple[Path, Path]) -> None:
    """A linked source would take the other's mtime, and its byte-code would be compiled again by every process."""
    a, b = venvs
    source = b"x = 1\n" * BIG
    small = os.urandom(BIG - 1)
    pairs = [
        (write(a / "mod.py", source), write(b / "mod.py", source)),
        (write(a / "small.so", small), write(b / "small.so", small)),
    ]

    assert "0 files linked" in link(a, b)
    assert not any(same_file(first, second) for first, second in pairs)


def test_symbolic_links_are_not_followed_or_replaced(venvs: tuple[Path, Path]) -> None:
    a, b = venvs
    content = os.urandom(BIG)
    target = write(a / "python3.11", content, 0o755)
    (b / "bin").mkdir(parents=True)
    (b / "bin" / "python").symlink_to(target)

    assert "0 files linked" in link(a, b)
    assert (b / "bin" / "python").is_symlink()


def test_a_second_run_links_nothing_new(venvs: tuple[Path, Path]) -> None:
    a, b = venvs
    content = os.urandom(BIG)
    write(a / "x.so", content)
    write(b / "x.so", content)
    link(a, b)

    assert "0 files linked, 0 MiB saved" in link(a, b)


def test_a_folder_that_does_not_exist_is_refused_by_name(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 2
    assert f"{tmp_path / 'nowhere'} is not a folder" in done.stderr
