"""Who is told that an environment was selected: a session that selects is about to train.

The runs part, floors above selection, starts its warm kits then (``runs.supervision.warm_start.prepare_first``);
``hermes_nb/__init__.py`` registers it, so that every process that imports the package has it, whichever face
(a cell, a magic, a widget) selects. This module imports nothing, as ``import hermes_nb`` must stay fast.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

_listeners: list[Callable[[], None]] = []
_muted = False


def on_selected(listener: Callable[[], None]) -> None:
    """Call ``listener`` after each environment selected in this process (once, however often registered)."""
    if listener not in _listeners:
        _listeners.append(listener)


def selected() -> None:
    """Tell the listeners that an environment was selected; each returns at once (it may start a thread)."""
    if _muted:
        return
    for listener in _listeners:
        listener()


@contextlib.contextmanager
def muted() -> Iterator[None]:
    """Tell no listener inside this block: a process that ends right after its command (the CLI) would start a kit
    for a run it never starts."""
    global _muted
    before, _muted = _muted, True
    try:
        yield
    finally:
        _muted = before
