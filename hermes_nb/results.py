"""Typed results of the ``rl_*`` calls, each with a JSON form, a text form and an HTML form for notebooks.

Each part keeps its own results beside it (``selection/results.py``, ``runs/table/results.py``,
``model_test/results.py``, ``rollouts/samples.py``); this module holds what they share. A result subclasses
``Result`` and overrides ``_text_lines()`` (and ``_html_body()`` where a table reads better).
``to_dict()`` answers with the keys of the Hermes Agent RL training tool (``file_path``, ``configurable_fields``,
``message`` ...), so code written against that tool reads these answers unchanged. Every form is passed through
``redact`` so that a key value can never be shown, whatever a field happens to contain.
"""

from __future__ import annotations

import html
import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from hermes_nb.system.secrets import redact


def format_duration(seconds: float | None) -> str:
    """A duration as every result, widget and progress line shows it: ``2m05s``, ``1h02m03s``; ``–`` unknown."""
    if seconds is None:
        return "–"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def html_table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(value_text(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def value_text(value: Any) -> str:
    """A value as results show it: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


class Result(BaseModel):
    """Base of every ``rl_*`` result."""

    model_config = ConfigDict(extra="forbid")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able answer with the Hermes RL tool's keys (see the module docstring)."""
        data: dict[str, Any] = redact(self._dict())
        return data

    def _dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def _text_lines(self) -> list[str]:
        return [json.dumps(self._dict(), indent=2, default=str)]

    def _html_body(self) -> str:
        return f"<pre>{html.escape(chr(10).join(self._text_lines()))}</pre>"

    def __str__(self) -> str:
        text: str = redact("\n".join(self._text_lines()))
        return text

    def _repr_html_(self) -> str:
        body: str = redact(self._html_body())
        return f"<div class='hermes-nb-result'>{body}</div>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython's plain-text form: the readable text, not the field-by-field repr."""
        printer.text(str(self))
