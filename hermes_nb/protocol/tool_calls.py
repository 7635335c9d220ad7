"""Tool calls in a model's text, in the Hermes format: ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``.

The format the Hermes and Qwen chat templates teach (one JSON object per block, several blocks allowed).
``parse_tool_calls`` turns an answer into OpenAI's shape (text content + ``tool_calls``). It is all or nothing:
one malformed block (bad JSON, no name, arguments that are not an object, a block left open) makes the whole
answer plain text, so a client never acts on part of what the model meant, and never sees a server error.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from hermes_nb.protocol.inference import ChatMessage, FunctionCall, ToolCall

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)


class ParsedAnswer(BaseModel):
    """An answer split into the text around its tool calls (None when there is none) and the calls."""

    content: str | None
    tool_calls: list[ToolCall]


def new_call_id() -> str:
    # OpenAI's ids look like ``call_<24 alphanumerics>``; clients only echo them back in ``tool_call_id``.
    return "call_" + uuid.uuid4().hex[:24]


def parse_tool_calls(text: str) -> ParsedAnswer:
    """The tool calls in ``text`` and the text around them; ``text`` unchanged with no calls if any is malformed."""
    plain = ParsedAnswer(content=text, tool_calls=[])
    if TOOL_CALL_OPEN not in text:
        return plain
    calls: list[ToolCall] = []
    for match in _BLOCK.finditer(text):
        function = _function(match.group(1))
        if function is None:
            return plain
        calls.append(ToolCall(id=new_call_id(), function=function))
    around = _BLOCK.sub("", text)
    if TOOL_CALL_OPEN in around or TOOL_CALL_CLOSE in around:
        return plain  # a block left open (cut by max_tokens) or a stray closing tag
    return ParsedAnswer(content=around.strip() or None, tool_calls=calls)


def _function(block: str) -> FunctionCall | None:
    """One block's call; None when it is not a JSON object with a non-empty string ``name`` and object
    ``arguments`` (given as an object, or as a string holding one: both spellings occur in the wild; absent
    means a call without arguments)."""
    try:
        call = json.loads(block)
    except ValueError:
        return None
    if not isinstance(call, dict):
        return None
    name = call.get("name")
    if not isinstance(name, str) or not name:
        return None
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return FunctionCall(name=name, arguments=json.dumps(arguments, ensure_ascii=False))


def template_tool_calls(calls: list[ToolCall]) -> list[dict[str, object]]:
    """Calls as chat templates expect them (Hugging Face convention): ``arguments`` as an object, not a string.
    An argument string that is not a JSON object is passed as it is, for the template to render."""
    rendered: list[dict[str, object]] = []
    for call in calls:
        arguments: object = call.function.arguments
        try:
            decoded = json.loads(call.function.arguments)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            arguments = decoded
        function = {"name": call.function.name, "arguments": arguments}
        rendered.append({"id": call.id, "type": "function", "function": function})
    return rendered


def template_message(message: ChatMessage | Mapping[str, Any]) -> dict[str, Any]:
    """A message as chat templates read it: plain data, no null fields, tool-call arguments as objects. The one
    reading of a message that the server's chat endpoint and the environment's renderer both give a template."""
    if isinstance(message, ChatMessage):
        rendered = message.model_dump(exclude_none=True, exclude={"tool_calls"})
        if message.tool_calls:
            rendered["tool_calls"] = template_tool_calls(message.tool_calls)
        return dict(template_data(rendered))
    return {key: template_data(value) for key, value in message.items() if value is not None}


def template_data(value: Any) -> Any:
    """``value`` as plain JSON data: what a sandboxed template may see (pydantic models dumped without nulls)."""
    if isinstance(value, BaseModel):
        return template_data(value.model_dump(exclude_none=True))
    if isinstance(value, Mapping):
        return {str(key): template_data(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [template_data(item) for item in value]
    return value
