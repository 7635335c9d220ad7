"""A warm process becomes exactly the command it is handed (its module as ``__main__``, its arguments, its whole
environment, its log, its exit code), is released by the end of its stdin, and is never handed another
interpreter's command; the install stamp that keeps a warm kit from serving stale code changes with the code."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_nb.runs.supervision.supervisor import TRAINER_MODULE
from hermes_nb.runs.supervision.warm_start import install_stamp
from hermes_nb.system.processes import child_environment
from hermes_nb.system.warm_process import assign, assignment_for, release, spawn_warm

SHOW_MODULE = """
import os, sys
print("argv", sys.argv[1:], "mark", os.environ.get("MARK"), "old", os.environ.get("ONLY_BEFORE"))
raise SystemExit(int(sys.argv[1]))
"""


@pytest.fixture
def module_dir(tmp_path: Path) -> Path:
    (tmp_path / "show_me.py").write_text(SHOW_MODULE, encoding="utf-8")
    return tmp_path


def _warm(module_dir: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    env = {**child_environment(), "PYTHONPATH": str(module_dir), "ONLY_BEFORE": "yes"}
    read_end, write_end = os.pipe()
    process = spawn_warm(["json"], log, env, write_end)
    os.close(write_end)
    return process, read_end


def test_a_warm_process_becomes_the_command_it_is_handed_with_its_environment_log_and_exit_code(
    module_dir: Path, tmp_path: Path
) -> None:
    process, ready = _warm(module_dir, tmp_path / "warm.log")
    assert select.select([ready], [], [], 60)[0] and os.read(ready, 1) == b"1"  # imported, then waiting
    run_log = tmp_path / "run.log"
    environment = {"PATH": os.environ["PATH"], "MARK": "the run's"}
    assignment = assignment_for([sys.executable, "-m", "show_me", "3", "x"], environment, run_log)
    assert os.getsid(process.pid) == os.getsid(0)  # until assigned: its starter's session, whose priority it shares
    assert assignment is not None and assign(process, assignment)
    assert os.getsid(process.pid) == os.getpgid(process.pid) == process.pid  # then its own, as a cold process's

    assert process.wait(timeout=60) == 3
    # Its environment is the run's alone: what it started with is gone.
    assert run_log.read_text(encoding="utf-8").strip() == "argv ['3', 'x'] mark the run's old None"
    assert "mark" not in (tmp_path / "warm.log").read_text(encoding="utf-8")


def test_a_released_warm_process_ends_without_running_anything(module_dir: Path, tmp_path: Path) -> None:
    process, _ = _warm(module_dir, tmp_path / "warm.log")
    release(process)
    assert process.returncode == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["/usr/bin/python3.12", "-m", TRAINER_MODULE],  # another interpreter: a vLLM or environment Python
        [sys.executable, "script.py"],  # not a module
        [sys.executable, "-m"],
    ],
)
def test_a_command_a_warm_process_cannot_be_starts_cold(argv: list[str], tmp_path: Path) -> None:
    assert assignment_for(argv, {}, tmp_path / "log") is None


def test_the_install_stamp_changes_when_a_module_file_changes(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    module = package / "a.py"
    module.write_text("x = 1\n", encoding="utf-8")
    before = install_stamp(package)
    assert install_stamp(package) == before
    module.write_text("x = 22\n", encoding="utf-8")
    assert install_stamp(package) != before
    changed = install_stamp(package)
    (package / "b.py").write_text("", encoding="utf-8")
    assert install_stamp(package) not in {before, changed}
