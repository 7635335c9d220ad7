"""A recorded conversation as text and as HTML: role by role, tool calls and tool results drawn as such.

Messages are read leniently (``dict``s as recorded): an environment may record OpenAI-shaped tool calls
(``{"function": {"name", "arguments"}}``), arguments as a JSON string or an object, and content as a string, a
list of parts or null.
"""

from __future__ import annotations

import html
import json
from typing import Any

# Role colours of the HTML form: the background of each turn's label.
_ROLE_COLOURS = {"system": "#eceff1", "user": "#e3f2fd", "assistant": "#e8f5e9", "tool": "#fff3e0"}
_BLOCK_STYLE = "margin:2px 0 6px 0;padding:4px 6px;white-space:pre-wrap;word-break:break-word;font-size:12px"


def message_text(message: dict[str, Any]) -> str:
    """The text of a message's ``content``: a string, the text parts of a list, or empty for null."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def tool_calls(message: dict[str, Any]) -> list[tuple[str, str]]:
    """``(name, arguments as pretty JSON or the string as given)`` of each tool call of a message."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    found = []
    for call in calls:
        function = call.get("function", call) if isinstance(call, dict) else {}
        if not isinstance(function, dict):
            continue
        found.append((str(function.get("name") or "?"), _arguments(function.get("arguments"))))
    return found


def _arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments
    return json.dumps(arguments, ensure_ascii=False)


def _role_label(message: dict[str, Any]) -> str:
    role = str(message.get("role") or "?")
    name = message.get("name") or message.get("tool_call_id")
    return f"{role} ({name})" if role == "tool" and name else role


def conversation_lines(messages: list[dict[str, Any]]) -> list[str]:
    """One ``[role] text`` line group per message; each tool call its own ``[tool call] name args`` line."""
    lines: list[str] = []
    for message in messages:
        text = message_text(message)
        if text or not tool_calls(message):
            lines.append(f"  [{_role_label(message)}] {text}")
        lines.extend(f"  [tool call] {name} {arguments}" for name, arguments in tool_calls(message))
    return lines


def conversation_html(messages: list[dict[str, Any]]) -> str:
    return "".join(_message_html(m) for m in messages)


def _message_html(message: dict[str, Any]) -> str:
    role = str(message.get("role") or "?")
    colour = _ROLE_COLOURS.get(role, "#f5f5f5")
    label = f"<div style='font-size:11px;color:#555'><b>{html.escape(_role_label(message))}</b></div>"
    text = message_text(message)
    parts = [f"<pre class='hermes-nb-message' style='{_BLOCK_STYLE};background:{colour}'>{html.escape(text)}</pre>"]
    if not text and tool_calls(message):
        parts = []
    parts += [
        f"<div class='hermes-nb-tool-call' style='{_BLOCK_STYLE};background:#ede7f6;font-family:monospace'>"
        f"<b>tool call</b> {html.escape(name)}({html.escape(arguments)})</div>"
        for name, arguments in tool_calls(message)
    ]
    css = "hermes-nb-tool-result" if role == "tool" else "hermes-nb-turn"
    return f"<div class='{css}'>{label}{''.join(parts)}</div>"
