"""Another Python runs this: the package link a foreign interpreter imports ``hermes_nb`` through."""

from __future__ import annotations

import os
from pathlib import Path

from hermes_nb.system import home
from hermes_nb.system.side_python import env_python_environment


def test_a_foreign_interpreter_sees_the_hermes_nb_package_and_nothing_else_of_this_venv() -> None:
    env = env_python_environment({"PYTHONPATH": "/user/path"})

    root, rest = env["PYTHONPATH"].split(os.pathsep)
    assert rest == "/user/path"
    assert [p.name for p in Path(root).iterdir()] == ["hermes_nb"]
    assert (Path(root) / "hermes_nb").resolve() == home.PACKAGE_DIR
    assert env["PYTHONUNBUFFERED"] == "1"
