"""A fake hosted model provider on loopback that behaves as OpenAI-compatible providers (OpenRouter) do.

- Text only: no token ids, no logprobs; ``usage`` is always present (one token per character, so sums check).
- ``n`` is ignored unless ``honours_n``: one choice per request, as many hosted models answer.
- Each model's first request is answered 429 with ``Retry-After`` (``retry_after``), once.
- The key is checked from the ``Authorization`` header; a wrong one is refused with a 401 whose message echoes
  what was sent (some providers do), so a test can check that the echo never reaches a result or a log.
- Models behave by name: answers are computed from the prompt for every shipped environment's format
  (``solve``), or looked up in ``ProviderState.answers`` for prompts a test registered (an environment whose
  answers only its generator knows: ``reasoning_gym``), right for most models, wrong for ``WRONG``, right but
  wordy for ``VERBOSE``; ``CHAT_ONLY`` answers 404 on ``/completions``; ``REFUSING`` refuses (content filter),
  ``EMPTY`` answers nothing, ``FAILING`` answers 503 and ``SLOW`` answers after ``slow_s``.
- ``TOOL_USER`` is an agent for the shipped ``calculator_agent``'s word problems, as capable hosted models are: when
  the request offers a ``calculate`` tool it answers with OpenAI ``tool_calls`` (arguments as a JSON string, or as
  an object when ``arguments_as_object``), one per step, the second built from the first step's tool result in
  the conversation, then the last result as its answer; offered no tool, it cannot work the problem out.
"""

# No `from __future__ import annotations`: FastAPI reads the route annotations of the local imports below.

import asyncio
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from env_host_fakes import serve_in_thread

FAKE_KEY = "sk-fake-provider-0123456789"
# The variable an endpoint URL's key is read from in these tests, named by HERMES_NB_TEST_API_KEY_ENV.
KEY_VAR = "FAKE_PROVIDER_KEY"
SOLVER = "fake/solver"
WRONG = "fake/wrong"
VERBOSE = "fake/verbose"
CHAT_ONLY = "fake/chat-only"
REFUSING = "fake/refusing"
EMPTY = "fake/empty"
FAILING = "fake/failing"
SLOW = "fake/slow"
TOOL_USER = "fake/tool-user"


@dataclass
class Call:
    path: str
    model: str
    status: int
    prompt: str


@dataclass
class ProviderState:
    api_key: str = FAKE_KEY
    retry_after: str = "1"
    rate_limit_first: bool = True
    honours_n: bool = False
    chat_only: set[str] = field(default_factory=lambda: {CHAT_ONLY})
    slow_s: float = 2.0
    arguments_as_object: bool = False
    calls: list[Call] = field(default_factory=list)
    limited: set[str] = field(default_factory=set)  # models whose one 429 was sent
    answers: dict[str, str] = field(default_factory=dict)  # prompt -> right answer, before ``solve``

    def calls_of(self, model: str) -> list[Call]:
        return [c for c in self.calls if c.model == model]


def solve(prompt: str) -> str:
    """The answer to a prompt of any shipped environment (arithmetic, reverse, sort, count)."""
    body = prompt.strip().removesuffix("=")
    if body.startswith("rev:"):
        return body[4:][::-1]
    if body.startswith("sort:"):
        return "".join(sorted(body[5:]))
    if body.startswith("count:"):
        _, letter, text = body.split(":")
        return str(text.count(letter))
    left, op, right = body.partition("+") if "+" in body else body.partition("-")
    try:
        return str(int(left) + int(right) if op == "+" else int(left) - int(right))
    except ValueError:
        return "?"


def word_problem_steps(question: str) -> tuple[str, str]:
    """The two expressions that solve a ``calculator_agent`` problem, the second with ``{}`` for the first result."""
    numbers = [int(n) for n in re.findall(r"\d+", question)]
    a, b, c = [*numbers, 0][:3]  # "times as many" has two numbers
    if "boxes of" in question:
        return f"{b}*{c}", f"{a}+{{}}"
    if "gives away" in question:
        return f"{a}-{b}", f"{{}}+{c}"
    if "shares them" in question:
        return f"{a}*{b}", f"{{}}/{c}"
    if "rows of" in question:
        return f"{a}*{b}", f"{{}}-{c}"
    return f"{a}*{b}", f"{a}+{{}}"  # "times as many"


def agent_turn(body: dict[str, Any], arguments_as_object: bool) -> dict[str, Any]:
    """``TOOL_USER``'s next chat message: a ``calculate`` call per step, then the last tool result."""
    messages = body.get("messages") or []
    offered = {t.get("function", {}).get("name") for t in body.get("tools") or []}
    if "calculate" not in offered:
        return {"role": "assistant", "content": "I would need a calculator."}
    results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
    if len(results) >= 2:
        return {"role": "assistant", "content": results[-1]}
    question = next(str(m.get("content")) for m in messages if m.get("role") == "user")
    first, second = word_problem_steps(question)
    expression = first if not results else second.format(results[0])
    arguments: Any = {"expression": expression}
    call = {"name": "calculate", "arguments": arguments if arguments_as_object else json.dumps(arguments)}
    tool_call = {"id": f"call_{len(results)}", "type": "function", "function": call}
    return {"role": "assistant", "content": None, "tool_calls": [tool_call]}


def answer(model: str, prompt: str, answers: dict[str, str] | None = None) -> tuple[str | None, str]:
    """(text, finish_reason) that ``model`` gives to ``prompt`` (its right answer from ``answers`` when there)."""
    right = answers[prompt] if answers and prompt in answers else solve(prompt)
    if model == WRONG:
        return right + "9", "stop"  # a different answer, never the right one inside a longer text
    if model == VERBOSE:
        return f"The answer is {right}.", "stop"
    if model == REFUSING:
        return None, "content_filter"
    if model == EMPTY:
        return "", "stop"
    return right, "stop"


def make_provider_app(state: ProviderState) -> Any:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI()

    async def gate(request: Request, path: str) -> tuple[dict[str, Any], Any]:
        """The request body, and the error answer to send instead (or None)."""
        body = await request.json()
        model = str(body.get("model", ""))
        prompt = body.get("prompt") if "prompt" in body else (body.get("messages") or [{}])[-1].get("content", "")
        sent = request.headers.get("authorization", "")
        error: Any = None
        if sent != f"Bearer {state.api_key}":
            error = JSONResponse({"error": {"message": f"invalid key: {sent}", "code": 401}}, status_code=401)
        elif state.rate_limit_first and model not in state.limited:
            state.limited.add(model)
            headers = {"Retry-After": state.retry_after}
            error = JSONResponse({"error": {"message": "rate limited", "code": 429}}, status_code=429, headers=headers)
        elif path == "completions" and model in state.chat_only:
            error = JSONResponse({"error": {"message": f"{model} serves chat only", "code": 404}}, status_code=404)
        elif model == FAILING:
            error = JSONResponse({"error": {"message": "upstream overloaded", "code": 503}}, status_code=503)
        state.calls.append(Call(path, model, error.status_code if error else 200, str(prompt)))
        if model == SLOW and error is None:
            await asyncio.sleep(state.slow_s)
        return body, error

    def choices(body: dict[str, Any], prompt: str, chat: bool) -> tuple[list[dict[str, Any]], int]:
        count = int(body.get("n", 1)) if state.honours_n else 1
        text, finish = answer(str(body.get("model", "")), prompt, state.answers)
        made = []
        for index in range(count):
            content = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
            made.append({"index": index, "finish_reason": finish, **content})
        return made, count * len(text or "")

    def usage(prompt: str, generated: int) -> dict[str, int]:
        return {"prompt_tokens": len(prompt), "completion_tokens": generated, "total_tokens": len(prompt) + generated}

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        body, error = await gate(request, "completions")
        if error is not None:
            return error
        prompt = str(body["prompt"])
        made, generated = choices(body, prompt, chat=False)
        return {
            "id": "cmpl-fake",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": made,
            "usage": usage(prompt, generated),
        }

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body, error = await gate(request, "chat")
        if error is not None:
            return error
        prompt = str(body["messages"][-1].get("content"))
        if body["model"] == TOOL_USER:
            message = agent_turn(body, state.arguments_as_object)
            finish = "tool_calls" if message.get("tool_calls") else "stop"
            made, generated = [{"index": 0, "finish_reason": finish, "message": message}], len(json.dumps(message))
        else:
            made, generated = choices(body, prompt, chat=True)
        return {
            "id": "chat-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": made,
            "usage": usage(prompt, generated),
        }

    @app.get("/v1/models")
    async def models() -> Any:
        return {"object": "list", "data": [{"id": SOLVER}, {"id": WRONG}, {"id": CHAT_ONLY}]}

    return app


@contextmanager
def fake_provider(state: ProviderState | None = None) -> Iterator[tuple[str, ProviderState]]:
    """``(base_url, state)`` of a fake provider, ``base_url`` ending in ``/v1``, served from a thread."""
    state = state or ProviderState()
    with serve_in_thread(make_provider_app(state), "fake provider") as url:
        yield f"{url}/v1", state


def use_key(monkeypatch: Any, key: str = FAKE_KEY) -> str:
    """Make endpoint URLs read their key from ``KEY_VAR`` holding ``key``, as a user would set it up."""
    from hermes_nb.model_test.targets import KEY_ENV_VAR

    monkeypatch.setenv(KEY_ENV_VAR, KEY_VAR)
    monkeypatch.setenv(KEY_VAR, key)
    return key


def right_and_wrong_tested(url: str) -> tuple[Any, Any, Any]:
    """``rl_test_inference`` of the selected environment against ``SOLVER`` and ``WRONG`` (2 groups of 4 each),
    checked to score the first fully and the second not at all: the result and the two models' results."""
    from hermes_nb.model_test.runner import rl_test_inference

    result = asyncio.run(rl_test_inference(num_steps=2, group_size=4, models=[f"{url}#{SOLVER}", f"{url}#{WRONG}"]))
    right, wrong = result.results
    assert [r.status for r in result.results] == ["ok", "ok"], str(result)
    assert (right.completions, right.correct, right.accuracy) == (8, 8, 1.0)
    assert (wrong.completions, wrong.correct, wrong.accuracy) == (8, 0, 0.0)
    return result, right, wrong
