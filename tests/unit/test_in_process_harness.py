"""The in-process harness's model calls (``frameworks/verifiers/in_process_harness.py``) against a real HTTP server
on loopback, in the verifiers side venv: a reply is the first choice's message without its null fields, the
request is the chat completions one the program's SDK sends (route, bearer, model, messages, tools), a context
overflow reads as one to verifiers' own check, a server error is retried as the SDK retries it and then is an
error with its status, an endpoint that cannot be reached is a transport error, and the process's HTTP session
closes."""

from __future__ import annotations

import json
import subprocess

from side_envs import side_env_python

from hermes_nb.system.side_python import env_python_environment

CHILD = """
import asyncio, json
from aiohttp import web
from verifiers.v1.harnesses.utils.compaction import is_context_overflow
from hermes_nb.frameworks.verifiers import in_process_harness as harness

REPLY = {"role": "assistant", "content": "46", "tool_calls": None, "refusal": None}
seen = {"requests": []}

async def completions(request):
    body = await request.json()
    seen["requests"].append({"path": request.path, "auth": request.headers.get("Authorization"), "body": body,
                             "retry": request.headers.get("x-stainless-retry-count")})
    kind = body["messages"][-1]["content"]
    if kind == "overflow":
        error = {"error": {"message": "This model's maximum context length is 64 tokens", "code": 400}}
        return web.json_response(error, status=400)
    if kind == "broken":
        return web.Response(text="upstream exploded", status=502)
    return web.json_response({"choices": [{"index": 0, "message": REPLY, "finish_reason": "stop"}]})

async def main():
    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    call = harness.ModelCall(f"http://127.0.0.1:{port}/v1/", "secret-1", "policy")
    tools = [{"type": "function", "function": {"name": "calculate", "parameters": {"type": "object"}}}]
    seen["reply"] = await call.reply([{"role": "user", "content": "12+34="}], tools)
    for kind in ("overflow", "broken"):
        try:
            await call.reply([{"role": "user", "content": kind}], [])
        except harness.APIStatusError as error:
            seen[kind] = {"status": error.status_code, "overflow": is_context_overflow(error), "text": str(error)}
    session = harness.shared_session()
    await runner.cleanup()
    try:
        await call.reply([{"role": "user", "content": "12+34="}], [])
    except harness.ModelTransportError as error:
        seen["unreachable"] = str(error)
    await harness.close_shared_session()
    seen["closed"] = session.closed
    print(json.dumps(seen))

asyncio.run(main())
"""


def test_model_calls_speak_chat_completions_and_fail_as_the_programs_sdk_would() -> None:
    done = subprocess.run(
        [str(side_env_python("verifiers")), "-c", CHILD], capture_output=True, text=True, timeout=120,
        env=env_python_environment({"PATH": "/usr/bin:/bin"}),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])

    assert seen["reply"] == {"role": "assistant", "content": "46"}
    first = seen["requests"][0]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer secret-1"
    assert first["body"]["model"] == "policy" and first["body"]["messages"] == [{"role": "user", "content": "12+34="}]
    assert first["body"]["tools"][0]["function"]["name"] == "calculate"
    assert "tools" not in seen["requests"][1]["body"]  # no tools: none offered, as the program sends it
    assert seen["overflow"]["status"] == 400 and seen["overflow"]["overflow"] is True
    assert seen["broken"]["status"] == 502 and seen["broken"]["overflow"] is False
    assert "upstream exploded" in seen["broken"]["text"]
    # A server error is sent again twice, as the SDK does, each retry counted in its header; an overflow is not.
    kinds = [(r["body"]["messages"][-1]["content"], r["retry"]) for r in seen["requests"]]
    assert kinds == [("12+34=", None), ("overflow", None), ("broken", None), ("broken", "1"), ("broken", "2")]
    assert "/v1/chat/completions" in seen["unreachable"]
    assert seen["closed"] is True
