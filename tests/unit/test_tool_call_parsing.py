"""Parsing Hermes-format tool calls out of a model's answer: well-formed, several, text around them, and every
malformed shape coming back as plain text."""

from __future__ import annotations

import json

import pytest

from hermes_nb.protocol.inference import FunctionCall, ToolCall
from hermes_nb.protocol.tool_calls import parse_tool_calls, template_tool_calls

WEATHER = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


def test_a_well_formed_call_becomes_a_tool_call_with_json_string_arguments() -> None:
    parsed = parse_tool_calls(WEATHER)
    assert parsed.content is None
    [call] = parsed.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


def test_several_calls_come_back_in_order_with_distinct_ids() -> None:
    text = WEATHER + '\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>'
    calls = parse_tool_calls(text).tool_calls
    assert [c.function.name for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[1].function.arguments) == {"zone": "CET"}
    assert calls[0].id != calls[1].id


def test_text_around_the_calls_is_the_content() -> None:
    parsed = parse_tool_calls("Let me check.\n" + WEATHER + "\n")
    assert parsed.content == "Let me check."
    assert len(parsed.tool_calls) == 1


def test_arguments_given_as_a_json_string_are_accepted() -> None:
    text = '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}</tool_call>'
    [call] = parse_tool_calls(text).tool_calls
    assert json.loads(call.function.arguments) == {"city": "Oslo"}


def test_a_call_without_arguments_has_empty_arguments() -> None:
    [call] = parse_tool_calls('<tool_call>{"name": "now"}</tool_call>').tool_calls
    assert call.function.arguments == "{}"


def test_text_without_calls_is_content_only() -> None:
    parsed = parse_tool_calls("It is 18 C.")
    assert parsed.content == "It is 18 C." and parsed.tool_calls == []


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>',  # bad JSON
        '<tool_call>{"arguments": {"city": "Paris"}}</tool_call>',  # no name
        '<tool_call>{"name": "", "arguments": {}}</tool_call>',  # empty name
        '<tool_call>{"name": 3, "arguments": {}}</tool_call>',  # name not a string
        '<tool_call>{"name": "f", "arguments": "not json"}</tool_call>',  # string arguments that are not JSON
        '<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>',  # arguments not an object
        '<tool_call>["get_weather"]</tool_call>',  # not an object
        '<tool_call>{"name": "get_weather", "arguments": {}}',  # left open (cut by max_tokens)
        WEATHER + '<tool_call>{"name": "f", "argu',  # a good call, then one left open
        WEATHER + "</tool_call>",  # a stray closing tag
        WEATHER + "<tool_call>oops</tool_call>",  # one good and one bad: all or nothing
    ],
)
def test_a_malformed_answer_comes_back_whole_as_text(text: str) -> None:
    parsed = parse_tool_calls(text)
    assert parsed.content == text
    assert parsed.tool_calls == []


def test_calls_are_given_to_chat_templates_with_object_arguments() -> None:
    calls = [
        ToolCall(id="call_1", function=FunctionCall(name="f", arguments='{"x": 1}')),
        ToolCall(id="call_2", function=FunctionCall(name="g", arguments="not json")),
    ]
    rendered = template_tool_calls(calls)
    assert rendered[0] == {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
    assert rendered[1]["function"] == {"name": "g", "arguments": "not json"}
