"""The monitor's log tail: the newest lines of a log as a person would see them in a terminal, kept in view.

Lines are read by ``hermes_nb.system.logtail`` (progress bars shown as a terminal shows them).

The view is a fixed-height box that starts scrolled to its end (a reversed flex column anchors the scroll at
the bottom in every browser), so new lines are what the user sees without scrolling.
"""

from __future__ import annotations

import html

from hermes_nb.system.logtail import tail_lines, terminal_line

__all__ = ["log_html", "tail_lines", "terminal_line"]

# About ten lines in view; the rest of the tail is there to scroll back to.
VIEW_HEIGHT = "180px"


def log_html(lines: list[str]) -> str:
    """The lines in a box scrolled to the newest (``column-reverse`` puts the scroll origin at the bottom)."""
    text = html.escape("\n".join(lines)) or "<i>(empty)</i>"
    return (
        f"<div class='hermes-nb-log-view' style='height:{VIEW_HEIGHT};overflow:auto;display:flex;"
        "flex-direction:column-reverse;border:1px solid #ddd;background:#fafafa'>"
        f"<pre style='margin:0;padding:4px;font-size:12px;line-height:1.35'>{text}</pre></div>"
    )
