"""Who is told that an environment was selected: a session that selects is about to train.

The runs part, floors above selection, starts its warm kit then (``runs.supervision.warm_start.prepare_first``);
``hermes_nb/__init__.py`` registers it, so that every process that imports the package has it, whichever face
(a cell, a magic, a widget) selects. This module imports nothing, as ``import hermes_nb`` must stay fast.
"""

from __future__ import annotations

from collections.abc import Callable

_listeners: list[Callable[[], None]] = []


def on_selected(listener: Callable[[], None]) -> None:
    """Call ``listener`` after each environment selected in this process (once, however often registered)."""
    if listener not in _listeners:
        _listeners.append(listener)


def selected() -> None:
    """Tell the listeners that an environment was selected; each returns at once (it may start a thread)."""
    for listener in _listeners:
        listener()
