"""Tool calls through the inference server with the real ``openai`` SDK: an agent asks, gets ``tool_calls``,
runs the tool, sends the result back, and gets a text answer.

The model is a tiny Llama with a tool-rendering chat template (``tests/unit/tool_model.py``), overfit on the two
prompts the server itself renders for this conversation, so its greedy answers are known: the server, its
template rendering and its parser are the real code under test.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai  # the dev extra installs it: a missing SDK fails here rather than skipping the round trip
import pytest
import torch
from tool_model import make_tool_model, overfit

from hermes_nb.inference.contract import Policy
from hermes_nb.inference.engine import InferenceEngine
from hermes_nb.inference.server import InferenceServer
from hermes_nb.system.net import free_port
from hermes_nb.testing import make_tiny_model

torch.set_num_threads(1)


TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
QUESTION = [{"role": "user", "content": "Weather in Paris?"}]
CALL_TEXT = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
TOOL_RESULT = '{"temp_c": 18}'
ANSWER_TEXT = "It is 18 C in Paris."


def get_weather(city: str) -> str:
    return TOOL_RESULT if city == "Paris" else '{"error": "unknown city"}'


def _after_call(call_id: str) -> list[dict[str, Any]]:
    call = {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    assistant = {"role": "assistant", "content": None, "tool_calls": [call]}
    return [*QUESTION, assistant, {"role": "tool", "tool_call_id": call_id, "content": TOOL_RESULT}]


def _policy(path: Path, version: int) -> Policy:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    return Policy(model=model, tokenizer=AutoTokenizer.from_pretrained(str(path)), version=version, name="tool")


def _rendered_prompt(url: str, messages: list[dict[str, Any]]) -> list[int]:
    body = {"messages": messages, "tools": TOOLS, "max_tokens": 1, "temperature": 0.0}
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    response.raise_for_status()
    return list(response.json()["prompt_token_ids"])


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server whose policy answers the question with ``CALL_TEXT`` and the tool result with ``ANSWER_TEXT``."""
    path = make_tool_model(tmp_path_factory.mktemp("tool_model"))
    server = InferenceServer(InferenceEngine(seed=0), free_port())
    server.start()
    try:
        untrained = _policy(path, version=0)
        server.engine.publish(untrained)
        url = f"http://127.0.0.1:{server.port}"
        tokenizer = untrained.tokenizer
        eos = [int(tokenizer.eos_token_id)]
        pairs = [
            (_rendered_prompt(url, QUESTION), tokenizer.encode(CALL_TEXT, add_special_tokens=False) + eos),
            (
                _rendered_prompt(url, _after_call("call_x")),
                tokenizer.encode(ANSWER_TEXT, add_special_tokens=False) + eos,
            ),
        ]
        overfit(path, pairs)
        server.engine.publish(_policy(path, version=1))
        yield url
    finally:
        server.stop()


def test_an_openai_sdk_agent_calls_a_tool_and_answers_with_its_result(tool_server: str) -> None:
    client = openai.OpenAI(base_url=f"{tool_server}/v1", api_key="unused", max_retries=0)
    messages: list[Any] = list(QUESTION)
    first = client.chat.completions.create(
        model="tool", messages=messages, tools=TOOLS, temperature=0.0, max_tokens=120
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    assert arguments == {"city": "Paris"}

    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": get_weather(**arguments)})
    second = client.chat.completions.create(
        model="tool", messages=messages, tools=TOOLS, temperature=0.0, max_tokens=60
    )
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == ANSWER_TEXT
    assert not second.choices[0].message.tool_calls


def test_a_streamed_tool_call_assembles_to_the_same_call_and_usage(tool_server: str) -> None:
    client = openai.OpenAI(base_url=f"{tool_server}/v1", api_key="unused", max_retries=0)
    asked: dict[str, Any] = {
        "model": "tool",
        "messages": QUESTION,
        "tools": TOOLS,
        "temperature": 0.0,
        "max_tokens": 120,
    }
    plain = client.chat.completions.create(**asked)
    chunks = list(client.chat.completions.create(**asked, stream=True, stream_options={"include_usage": True}))

    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [call for d in deltas for call in d.tool_calls or []]
    [expected] = plain.choices[0].message.tool_calls or []
    assert [(c.index, c.function.name, c.function.arguments) for c in calls] == [
        (0, expected.function.name, expected.function.arguments)
    ]
    assert "".join(d.content or "" for d in deltas) == (plain.choices[0].message.content or "")
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert chunks[-1].choices == [] and chunks[-1].usage == plain.usage


def test_a_streamed_answer_is_the_plain_answers_text_and_exact_tokens(tool_server: str) -> None:
    body = {"messages": _after_call("call_x"), "tools": TOOLS, "temperature": 0.0, "max_tokens": 60}
    plain = httpx.post(f"{tool_server}/v1/chat/completions", json=body, timeout=30).json()["choices"][0]
    with httpx.stream(
        "POST", f"{tool_server}/v1/chat/completions", json={**body, "stream": True}, timeout=30
    ) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in answer.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event)["choices"] for event in events[:-1]]
    streamed = [choice for choices in chunks for choice in choices]
    assert "".join(c["delta"].get("content") or "" for c in streamed) == plain["message"]["content"] == ANSWER_TEXT
    assert [c["token_ids"] for c in streamed if "token_ids" in c] == [plain["token_ids"]]


def test_a_streamed_text_completion_reads_as_the_plain_one(tool_server: str) -> None:
    client = openai.OpenAI(base_url=f"{tool_server}/v1", api_key="unused", max_retries=0)
    asked: dict[str, Any] = {"model": "tool", "prompt": "Weather", "temperature": 0.0, "max_tokens": 8, "n": 2}
    plain = client.completions.create(**asked)
    chunks = list(client.completions.create(**asked, stream=True, stream_options={"include_usage": True}))
    texts = {i: "".join(c.choices[0].text for c in chunks if c.choices and c.choices[0].index == i) for i in (0, 1)}
    assert texts == {choice.index: choice.text for choice in plain.choices}
    assert chunks[-1].usage == plain.usage


def test_tool_call_answers_keep_their_exact_token_ids(tool_server: str) -> None:
    body = {"messages": QUESTION, "tools": TOOLS, "temperature": 0.0, "max_tokens": 120, "logprobs": True}
    choice = httpx.post(f"{tool_server}/v1/chat/completions", json=body, timeout=30).json()["choices"][0]
    tokens = "".join(entry["token"] for entry in choice["logprobs"]["content"])
    assert choice["finish_reason"] == "tool_calls"
    assert len(choice["token_ids"]) == len(choice["logprobs"]["content"])
    assert tokens.startswith(CALL_TEXT)  # the sampled tokens are the call's text (then eos), not a re-encoding


def test_a_named_tool_choice_renders_that_tool_and_parses_its_call(tool_server: str) -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    body = {"messages": QUESTION, "tools": TOOLS, "tool_choice": choice, "temperature": 0.0, "max_tokens": 120}
    answer = httpx.post(f"{tool_server}/v1/chat/completions", json=body, timeout=30).json()["choices"][0]
    assert answer["finish_reason"] == "tool_calls"
    assert answer["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_a_tool_choice_naming_no_given_tool_is_refused(tool_server: str) -> None:
    choice = {"type": "function", "function": {"name": "get_time"}}
    body = {"messages": QUESTION, "tools": TOOLS, "tool_choice": choice, "max_tokens": 4}
    response = httpx.post(f"{tool_server}/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 400
    assert "tool_choice" in response.json()["detail"] and "get_time" in response.json()["detail"]


def test_earlier_tool_calls_and_results_are_rendered_into_the_prompt(tool_server: str) -> None:
    body = {"messages": _after_call("call_1"), "tools": TOOLS, "max_tokens": 1}
    choice = httpx.post(f"{tool_server}/v1/chat/completions", json=body, timeout=30).json()
    prompt = _decoded(choice["prompt_token_ids"])
    assert '"name": "get_weather"' in prompt.split("<|im_end|>")[0]  # the tool schema, in the system turn
    assert CALL_TEXT in prompt  # the call as the model wrote it (arguments re-rendered as an object)
    assert f"<tool_response>{TOOL_RESULT}</tool_response>" in prompt


def _decoded(ids: list[int]) -> str:
    from transformers import AutoTokenizer

    from hermes_nb.system.home import embedded_base_model_dir

    tokenizer = AutoTokenizer.from_pretrained(str(embedded_base_model_dir()))  # the tool model's vocabulary
    return str(tokenizer.decode(ids))


def test_null_content_is_refused_outside_an_assistant_tool_call_turn(tool_server: str) -> None:
    body = {"messages": [{"role": "user", "content": None}], "max_tokens": 1}
    response = httpx.post(f"{tool_server}/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 422
    assert "content" in response.text


def test_tools_are_refused_by_a_model_whose_template_cannot_render_them(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = make_tiny_model(tmp_path)  # the shipped character model's template: no tools
    server = InferenceServer(InferenceEngine(seed=0), free_port())
    server.start()
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path)).eval()
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        server.engine.publish(Policy(model=model, tokenizer=tokenizer, version=0, name="tiny"))
        body = {"messages": QUESTION, "tools": TOOLS, "max_tokens": 1}
        response = httpx.post(f"http://127.0.0.1:{server.port}/v1/chat/completions", json=body, timeout=30)
    finally:
        server.stop()
    assert response.status_code == 400
    assert response.json()["detail"].startswith("tools: the model's chat template does not render tools")
