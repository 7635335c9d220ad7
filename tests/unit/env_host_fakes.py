"""Loopback servers for the environment host tests: a fake inference server and the real trajectory API.

The fake inference server speaks the real protocol models (``hermes_nb.protocol.inference``) and answers
deterministically: choice ``i`` of a sampled request is the text ``str(i % 2)``, greedy requests (temperature 0)
answer ``"0"``. Every completion ends with ``EOS`` and each token's logprob is ``-0.1 * (position + 1)``.
"""

# No `from __future__ import annotations`: FastAPI reads the route annotations of the local imports below.

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from hermes_nb.system.net import LOOPBACK, free_port

EOS = 2
REJECTED_PROMPT = "reject me"
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class FakeInferenceState:
    completion_requests: int = 0
    fail_next: int = 0  # answer this many requests with 503 first
    delay_s: float = 0.0
    in_flight: int = 0
    max_in_flight: int = 0
    authorization: list[str] = field(default_factory=list)
    bad_logprobs: bool = False
    prompts_per_request: list[int] = field(default_factory=list)


def prompt_ids(prompt: str) -> list[int]:
    return [ord(ch) for ch in prompt]


def completion_ids(text: str) -> list[int]:
    return [*(ord(ch) for ch in text), EOS]


def make_inference_app(state: FakeInferenceState) -> Any:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    from hermes_nb.protocol.inference import (
        CompletionChoice,
        CompletionLogprobs,
        CompletionRequest,
        CompletionResponse,
        GeneratedSequence,
        GenerateRequest,
        GenerateResponse,
        HealthResponse,
        Usage,
    )

    app = FastAPI()

    def choice(index: int, request: CompletionRequest) -> CompletionChoice:
        text = "0" if request.temperature == 0 else str(index % 2)
        ids = completion_ids(text)
        logprobs = [-0.1 * (k + 1) for k in range(len(ids) - (1 if state.bad_logprobs else 0))]
        return CompletionChoice(
            index=index,
            text=text,
            token_ids=ids,
            finish_reason="stop",
            logprobs=CompletionLogprobs(
                tokens=[chr(i) for i in ids], token_logprobs=logprobs, text_offset=list(range(len(ids)))
            ),
        )

    @app.post("/v1/completions", response_model=None)
    async def completions(request: CompletionRequest, raw: Request) -> Any:
        state.completion_requests += 1
        state.authorization.append(raw.headers.get("authorization", ""))
        prompts = [request.prompt] if isinstance(request.prompt, str) else request.prompt
        assert all(isinstance(p, str) for p in prompts)
        state.prompts_per_request.append(len(prompts))
        if REJECTED_PROMPT in prompts:
            index = prompts.index(REJECTED_PROMPT)
            return JSONResponse({"detail": f"prompt[{index}]: refused by the fake server"}, status_code=400)
        if state.fail_next > 0:
            state.fail_next -= 1
            return JSONResponse({"detail": "sampler reloading"}, status_code=503)
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            await asyncio.sleep(state.delay_s)
        finally:
            state.in_flight -= 1
        ids = [prompt_ids(str(p)) for p in prompts]
        choices = [choice(k, request) for k in range(len(prompts) * request.n)]
        generated = sum(len(c.token_ids) for c in choices)
        prompt_tokens = sum(len(i) for i in ids)
        return CompletionResponse(
            id="cmpl-1",
            created=int(time.time()),
            model=request.model,
            choices=choices,
            usage=Usage(
                prompt_tokens=prompt_tokens, completion_tokens=generated, total_tokens=prompt_tokens + generated
            ),
            prompt_token_ids=ids,
        )

    @app.post("/generate")
    async def generate(request: GenerateRequest) -> GenerateResponse:
        sequences = [
            GeneratedSequence(prompt_index=p, token_ids=[7, EOS], logprobs=[-0.5, -0.25], finish_reason="stop")
            for p in range(len(request.prompt_token_ids))
            for _ in range(request.n)
        ]
        return GenerateResponse(sequences=sequences, policy_version=3)

    @app.get("/health")
    async def health() -> HealthResponse:
        return HealthResponse(model="fake", policy_version=3)

    return app


@contextmanager
def serve_in_thread(app: Any, what: str) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of ``app`` served by uvicorn from a thread of this process, stopped on leaving."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host=LOOPBACK, port=port, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.02)
    try:
        yield f"http://{LOOPBACK}:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def fake_inference_server(state: FakeInferenceState | None = None) -> Iterator[tuple[str, FakeInferenceState]]:
    """``(url, state)`` of a fake inference server on a loopback port, served from a thread of this process."""
    state = state or FakeInferenceState()
    with serve_in_thread(make_inference_app(state), "fake inference server") as url:
        yield url, state


@contextmanager
def trajectory_api_process(log_path: Path) -> Iterator[str]:
    """The real trajectory API (``python -m hermes_nb.trajectory_api``) on a free loopback port."""
    port = free_port()
    url = f"http://{LOOPBACK}:{port}"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hermes_nb.trajectory_api", "--host", LOOPBACK, "--port", str(port)],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_healthy(url + "/health", proc, log_path)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"trajectory API exited {proc.returncode}: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"trajectory API did not answer /health: {log_path.read_text()[-2000:]}")


# A throwaway environment: prompt "q<k>", answer "0"; an item whose number is in FAIL_ON raises.
TINY_ENV = textwrap.dedent(
    """
    from hermes_nb.env import BaseEnv, BaseEnvConfig, QAItem, build_scored_group


    class TinyConfig(BaseEnvConfig):
        fail_every: int = 0  # every fail_every-th item raises (0 = never)
        fail_always: bool = False


    class TinyEnv(BaseEnv):
        name = "tiny"
        env_config_cls = TinyConfig

        async def setup(self):
            self.counter = 0
            self.torn_down = False

        async def teardown(self):
            self.torn_down = True

        async def get_next_item(self):
            self.counter += 1
            return QAItem(prompt=f"q{self.counter}=", answer="0", metadata={"n": self.counter})

        async def collect_trajectories(self, item):
            n = item.metadata["n"]
            if self.config.fail_always or (self.config.fail_every and n % self.config.fail_every == 0):
                raise RuntimeError(f"tiny env broke on item {n}")
            completions = await self.server.sample(item.prompt, n=self.config.group_size, max_tokens=4)
            scores = [1.0 if c.text == item.answer else 0.0 for c in completions]
            return build_scored_group(completions, scores), []

        async def evaluate(self, *args, **kwargs):
            items = [f"e{k}=" for k in range(4)]
            texts = [(await self.server.sample(p, n=1, temperature=0.0))[0].text for p in items]
            return {"eval/percent_correct": sum(t == "0" for t in texts) / len(texts)}
    """
)


def write_tiny_env(directory: Path) -> Path:
    path = directory / "tiny_env.py"
    path.write_text(TINY_ENV, encoding="utf-8")
    return path
