"""MkDocs hooks of the docs site (mkdocs.yml): the API reference is made from the public commands themselves.

``docs/api.md`` holds a marker where each public ``rl_*`` command of ``hermes_nb.api`` is rendered by mkdocstrings.
The names are read from ``hermes_nb.api`` by griffe, statically (the module is not imported, so the docs build
needs no torch), and a command without a docstring is logged as a warning, which fails the strict build.
"""

from __future__ import annotations

import logging
from typing import Any

import griffe

API_MODULE = "hermes_nb.api"
COMMANDS_MARKER = "<!-- public commands -->"
log = logging.getLogger("mkdocs.hooks.docs_hooks")


def public_commands() -> dict[str, str]:
    """Each public command of ``hermes_nb.api`` -> its docstring ("" when it has none)."""
    module = griffe.load(API_MODULE, search_paths=["."], resolve_aliases=True, resolve_external=False)
    commands = {}
    for name, member in sorted(module.members.items()):
        if name.startswith("rl_"):
            commands[name] = member.docstring.value if member.docstring else ""
    return commands


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if COMMANDS_MARKER not in markdown:
        return markdown
    commands = public_commands()
    for name, docstring in commands.items():
        if not docstring.strip():
            log.warning("public command %s.%s has no docstring: the API reference needs one", API_MODULE, name)
    blocks = [f"::: {API_MODULE}.{name}" for name in commands]
    return markdown.replace(COMMANDS_MARKER, "\n\n".join(blocks))
