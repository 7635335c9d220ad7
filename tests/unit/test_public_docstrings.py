"""Every public command has a docstring: the docs site's API reference is made from them (mkdocs.yml)."""

from __future__ import annotations

import inspect

import hermes_nb.api


def test_every_public_command_has_a_docstring() -> None:
    commands = [name for name in hermes_nb.api.__all__ if name.startswith("rl_")]
    assert commands, "hermes_nb.api exports no rl_* command"
    missing = [name for name in commands if not (inspect.getdoc(getattr(hermes_nb.api, name)) or "").strip()]
    assert not missing, f"public commands without a docstring (the API reference needs one): {missing}"
