"""Hosted models, piece by piece: the provider client (rate limits, ``n``, chat-only models, trouble counted),
the environment's sampling from a text-only endpoint, the guarantee that nothing is trained from what such an
endpoint answered, the hosted-models config and references, and the report's three forms.

The provider is ``fake_provider``: a real HTTP server on loopback that answers as hosted providers do (text only,
``usage``, one 429 with ``Retry-After`` per model, ``n`` ignored, a chat-only model that answers 404 on
``/completions``, the key checked from the ``Authorization`` header). ``test_model_test_hosted.py`` runs
``rl_test_inference`` against it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from env_host_fakes import trajectory_api_process
from fake_provider import (
    CHAT_ONLY,
    EMPTY,
    FAILING,
    KEY_VAR,
    REFUSING,
    SLOW,
    SOLVER,
    ProviderState,
    fake_provider,
    use_key,
)

from hermes_nb.config import RunConfig
from hermes_nb.env import APIServerConfig, build_scored_group
from hermes_nb.env.inference_client import ServerManager
from hermes_nb.errors import ConfigError
from hermes_nb.model_test.hosted import HOSTED_MODELS_FILE, load_hosted_config
from hermes_nb.model_test.provider_client import ProviderAnswer, ProviderClient, ProviderRefused
from hermes_nb.model_test.results import InferenceTestResult, ModelTestResult, SampledAnswer
from hermes_nb.model_test.settings import EndpointSettings, EndpointStats
from hermes_nb.model_test.targets import resolve_targets
from hermes_nb.protocol.inference import SamplingParams
from hermes_nb.system import home
from hermes_nb.trainer.step.advantages import group_data

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def provider_key(monkeypatch: pytest.MonkeyPatch) -> str:
    return use_key(monkeypatch)


def _client_run(settings: EndpointSettings, call: Any, **client_kwargs: Any) -> tuple[Any, EndpointStats]:
    """``call(client)`` on a fresh client in a fresh loop; the client is closed in that loop."""

    async def go() -> Any:
        client = ProviderClient(settings, **client_kwargs)
        try:
            return await call(client), client.stats
        finally:
            await client.aclose()

    result: tuple[Any, EndpointStats] = asyncio.run(go())
    return result


def _complete(prompt: str, n: int) -> Any:
    async def call(client: ProviderClient) -> ProviderAnswer:
        return await client.complete(prompt, SamplingParams(n=n, max_tokens=8))

    return call


# ---- the provider client ---------------------------------------------------------------------------------------


def test_a_429_is_waited_out_for_its_retry_after_and_counted(provider_key: str) -> None:
    with fake_provider() as (url, state):
        started = time.monotonic()
        answer, stats = _client_run(
            EndpointSettings(base_url=url, model=SOLVER, api_key_env=KEY_VAR), _complete("12+34=", 1)
        )
        elapsed = time.monotonic() - started
    assert [c.text for c in answer.choices] == ["46"]
    assert [c.status for c in state.calls] == [429, 200]
    assert (stats.rate_limited, stats.rate_limit_wait_s, stats.requests, stats.answered) == (1, 1.0, 2, 1)
    assert elapsed >= 1.0  # Retry-After: 1 was waited out
    assert (stats.prompt_tokens, stats.completion_tokens) == (len("12+34="), len("46"))  # usage, summed


def test_a_provider_that_ignores_n_is_asked_once_per_missing_completion(provider_key: str) -> None:
    with fake_provider(ProviderState(rate_limit_first=False)) as (url, state):
        settings = EndpointSettings(base_url=url, model=SOLVER, api_key_env=KEY_VAR)
        answer, stats = _client_run(settings, _complete("rev:abc=", 4))
    assert [c.text for c in answer.choices] == ["cba"] * 4
    assert len(state.calls) == stats.requests == 4
    assert (answer.prompt_tokens, answer.completion_tokens) == (4 * len("rev:abc="), 4 * 3)
    assert all(c.token_ids is None for c in answer.choices)  # text only


def test_a_chat_only_model_gets_the_prompt_as_one_user_message_from_then_on(provider_key: str) -> None:
    async def twice(client: ProviderClient) -> list[ProviderAnswer]:
        params = SamplingParams(n=1, max_tokens=8)
        return [await client.complete("2+2=", params), await client.complete("3+4=", params)]

    with fake_provider(ProviderState(rate_limit_first=False)) as (url, state):
        answers, stats = _client_run(EndpointSettings(base_url=url, model=CHAT_ONLY, api_key_env=KEY_VAR), twice)
    assert [a.choices[0].text for a in answers] == ["4", "7"]
    assert [(c.path, c.status) for c in state.calls] == [("completions", 404), ("chat", 200), ("chat", 200)]
    assert [c.prompt for c in state.calls] == ["2+2=", "2+2=", "3+4="]  # the prompt itself, as the user message
    assert stats.sent_as_chat


def test_a_model_configured_as_chat_only_is_asked_by_chat_from_the_start(provider_key: str) -> None:
    with fake_provider(ProviderState(rate_limit_first=False)) as (url, state):
        settings = EndpointSettings(base_url=url, model=SOLVER, api_key_env=KEY_VAR, chat_only=True)
        answer, stats = _client_run(settings, _complete("2+2=", 1))
    assert answer.choices[0].text == "4" and [c.path for c in state.calls] == ["chat"] and stats.sent_as_chat


def _answering(message: dict[str, Any], finish_reason: str) -> httpx.MockTransport:
    """A provider stand-in that answers every chat request with ``message`` (only the body's shape matters here)."""
    body = {"choices": [{"index": 0, "message": message, "finish_reason": finish_reason}], "usage": {}}
    return httpx.MockTransport(lambda request: httpx.Response(200, json=body))


def _chat_once(client: ProviderClient) -> Any:
    tool = {"type": "function", "function": {"name": "calculate", "parameters": {"type": "object"}}}
    return client.chat([{"role": "user", "content": "6*7?"}], SamplingParams(n=1), tools=[tool])


@pytest.mark.parametrize(
    ("arguments", "finish_reason"),
    [('{"expression": "6*7"}', "tool_calls"), ({"expression": "6*7"}, "function_call")],
    ids=["json-arguments", "object-arguments"],
)
def test_a_hosted_models_tool_calls_come_back_in_openais_shape(arguments: Any, finish_reason: str) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "calculate", "arguments": arguments}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    settings = EndpointSettings(base_url="http://provider.invalid/v1", model="m")
    answer, stats = _client_run(settings, _chat_once, transport=_answering(message, finish_reason))
    [choice] = answer.choices
    assert choice.finish_reason == "tool_calls" and choice.text == ""
    assert [(c.function.name, c.function.arguments) for c in choice.tool_calls or []] == [
        ("calculate", '{"expression": "6*7"}')
    ]
    assert stats.empty_answers == 0  # calls made without text are an answer


def test_a_malformed_tool_call_from_a_hosted_model_leaves_its_text_alone() -> None:
    message = {"role": "assistant", "content": "42", "tool_calls": [{"id": "c1", "function": {"arguments": "{}"}}]}
    settings = EndpointSettings(base_url="http://provider.invalid/v1", model="m")
    answer, _ = _client_run(settings, _chat_once, transport=_answering(message, "stop"))
    [choice] = answer.choices
    assert (choice.text, choice.tool_calls) == ("42", None)


@pytest.mark.parametrize(
    ("model", "counter", "expected"),
    [(SLOW, "timeouts", 2), (FAILING, "server_errors", 2), (REFUSING, "refusals", 3), (EMPTY, "empty_answers", 3)],
)
def test_provider_trouble_is_counted_per_model_and_not_fatal(
    provider_key: str, model: str, counter: str, expected: int
) -> None:
    waits: list[float] = []

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    state = ProviderState(rate_limit_first=False, honours_n=True, slow_s=1.0)
    with fake_provider(state) as (url, _):
        settings = EndpointSettings(
            base_url=url, model=model, api_key_env=KEY_VAR, request_timeout_s=0.3, max_attempts=2
        )
        answer, stats = _client_run(settings, _complete("1+1=", 3), sleep=no_wait)
    assert [c.text for c in answer.choices] == [""] * 3  # three completions came back all the same
    assert getattr(stats, counter) == expected
    gave_up = model in (SLOW, FAILING)
    assert stats.failed_completions == (3 if gave_up else 0)
    assert (stats.last_error is not None) == gave_up


def test_a_refused_key_is_reported_without_the_key_the_provider_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    sent = "sk-wrong-key-9876543210"
    monkeypatch.setenv(KEY_VAR, sent)
    with fake_provider() as (url, _), pytest.raises(ProviderRefused) as refused:
        _client_run(EndpointSettings(base_url=url, model=SOLVER, api_key_env=KEY_VAR), _complete("1+1=", 1))
    assert refused.value.status_code == 401
    assert "invalid key" in str(refused.value) and sent not in str(refused.value) and "***" in str(refused.value)


# ---- the environment's sampling from a text-only endpoint --------------------------------------------------------


async def _sample_and_close(manager: ServerManager, prompt: str, n: int) -> Any:
    try:
        return await manager.sample(prompt, n=n, max_tokens=8)
    finally:
        await manager.aclose()


def test_sampling_a_text_only_endpoint_gives_the_text_and_token_ids_of_the_runs_tokenizer(provider_key: str) -> None:
    from tokenizers import Tokenizer

    config = APIServerConfig(base_url="", model_name=SOLVER, api_key_env=KEY_VAR)
    with fake_provider(ProviderState(rate_limit_first=False, honours_n=True)) as (url, _):
        manager = ServerManager([config.model_copy(update={"base_url": url})], tokenizer_name="embedded")
        completions = asyncio.run(_sample_and_close(manager, "12+34=", 2))
    tokenizer = Tokenizer.from_file(str(home.embedded_base_model_dir() / "tokenizer.json"))
    assert [c.text for c in completions] == ["46", "46"]
    assert all(c.test_only and c.logprobs is None for c in completions)
    assert completions[0].prompt_token_ids == tokenizer.encode("12+34=").ids
    assert completions[0].token_ids == tokenizer.encode("46", add_special_tokens=False).ids
    assert manager.text_only_answers == 1


def test_an_atropos_style_chat_completion_from_a_text_only_endpoint_is_its_text(provider_key: str) -> None:
    async def ask(manager: ServerManager) -> Any:
        try:
            return await manager.chat_completion(messages=[{"role": "user", "content": "2+3="}], max_tokens=8)
        finally:
            await manager.aclose()

    with fake_provider(ProviderState(rate_limit_first=False)) as (url, _):
        config = APIServerConfig(base_url=url, model_name=CHAT_ONLY, api_key_env=KEY_VAR)
        response = asyncio.run(ask(ServerManager([config])))
    assert [choice.message.content for choice in response.choices] == ["5"]
    assert response.choices[0].token_ids is None and response.prompt_token_ids is None
    assert response.usage.total_tokens == len("2+3=") + len("5")


def test_nothing_is_trained_from_a_group_built_from_text_only_answers(provider_key: str, tmp_path: Path) -> None:
    config = APIServerConfig(base_url="", model_name=SOLVER, api_key_env=KEY_VAR)
    with fake_provider(ProviderState(rate_limit_first=False, honours_n=True)) as (url, _):
        manager = ServerManager([config.model_copy(update={"base_url": url})], tokenizer_name="embedded")
        completions = asyncio.run(_sample_and_close(manager, "12+34=", 2))
    group = build_scored_group(completions, [1.0, 0.0])
    assert group is not None and group.is_test_only() and group.inference_logprobs is None

    # The trajectory API refuses it, alone or in a list ...
    with trajectory_api_process(tmp_path / "api.log") as api_url:
        body = group.model_dump(mode="json", exclude_none=True)
        alone = httpx.post(f"{api_url}/scored_data", json=body, timeout=10)
        listed = httpx.post(f"{api_url}/scored_data_list", json=[body], timeout=10)
        queued = httpx.get(f"{api_url}/status", timeout=10).json()
    assert (alone.status_code, listed.status_code) == (422, 422)
    assert "test_only" in alone.json()["detail"] and queued["queue_size"] == 0
    # ... and the trainer drops one that came another way (a replayed file), though the same group unmarked trains.
    assert group_data(group) == ([], [])
    assert group_data(group.model_copy(update={"group_overrides": None}))[0]


# ---- configuration and references ------------------------------------------------------------------------------


def test_the_hosted_models_file_overrides_the_defaults_and_a_bad_field_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = home.home_dir() / HOSTED_MODELS_FILE
    path.write_text("large: some/large-model\nchat_only: [some/large-model]\n", encoding="utf-8")
    config = load_hosted_config()
    assert (config.small, config.large, config.base_url) == ("qwen/qwen3-8b", "some/large-model", config.base_url)
    monkeypatch.setenv(config.api_key_env, "sk-anything")
    targets = resolve_targets(None, RunConfig(), config)
    assert [(t.reference, t.scale, t.chat_only) for t in targets] == [
        ("qwen/qwen3-8b", "small", False),
        ("z-ai/glm-4.7-flash", "medium", False),
        ("some/large-model", "large", True),
        ("embedded", "base", False),
    ]
    path.write_text("larg: x\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"hosted_models\.yaml: larg"):
        load_hosted_config()


def test_a_hosted_model_id_is_a_model_at_the_provider() -> None:
    [target] = resolve_targets(["anthropic/claude-sonnet-4"], RunConfig())
    assert (target.kind, target.location, target.model_name, target.api_key_env) == (
        "endpoint",
        "https://openrouter.ai/api/v1",
        "anthropic/claude-sonnet-4",
        "OPENROUTER_API_KEY",
    )


# ---- the report --------------------------------------------------------------------------------------------------


def _result() -> InferenceTestResult:
    sample = SampledAnswer(prompt="12+34=", completion="46", score=1.0, correct=True, finish_reason="stop")
    hosted = ModelTestResult(
        status="ok", steps=3, completions=48, correct=48, accuracy=1.0, model="qwen/qwen3-8b", kind="endpoint",
        location="https://openrouter.ai/api/v1", scale="small", steps_requested=3, requests=49, rate_limited=1,
        prompt_tokens=300, completion_tokens=100, mean_latency_s=0.4, sent_as_chat=True, samples=[sample],
    )  # fmt: skip
    base = ModelTestResult(
        status="ok", steps=3, completions=48, correct=12, accuracy=0.25, model="embedded", kind="local",
        location="/m", scale="base", steps_requested=3, format_failures=5, requests=3,
    )  # fmt: skip
    return InferenceTestResult(
        environment="arithmetic", environment_file="a.py", num_steps=3, group_size=16, output_dir="d",
        results=[hosted, base],
    )  # fmt: skip


def test_the_report_reads_as_a_table_with_bars_samples_and_notes() -> None:
    text = str(_result())
    assert "accuracy" in text and "format" in text and "latency" in text and "tokens" in text
    assert "########## 100.0%" in text and "##........  25.0%" in text
    assert "400" in text and "1 rate-limited" in text and "5/48" in text
    assert "'12+34=' -> '46' (score 1, correct)" in text and "chat-only model" in text
    assert "best model: qwen/qwen3-8b" in text


def test_the_html_form_is_a_table_and_a_bar_chart() -> None:
    page = _result()._repr_html_()
    assert page.count("<table") == 2  # the figures, then the accuracy bars
    assert "width:100%" in page and "width:25%" in page


def test_the_json_keeps_the_tools_keys_and_adds_the_new_figures() -> None:
    data = _result().to_dict()
    assert set(data) >= {"environment", "environment_file", "test_config", "models_tested", "summary", "notes"}
    assert set(data["summary"]) >= {"models_tested", "models_succeeded", "best_model", "avg_accuracy", "total_tokens"}
    model = data["models_tested"][0]
    assert set(model) >= {
        "model", "name", "scale", "steps", "steps_tested", "steps_with_correct", "total_completions",
        "correct_completions", "accuracy", "step_success_rate", "output_file", "error",
        "format_failures", "mean_latency_s", "total_tokens", "requests", "rate_limited", "sent_as_chat", "samples",
    }  # fmt: skip
    assert (model["total_tokens"], model["samples"][0]["completion"]) == (400, "46")


def test_groups_whose_every_completion_is_a_format_failure_do_not_make_a_working_environment() -> None:
    unread = SampledAnswer(prompt="Mia has 23 pens...", completion=None, score=0.0, correct=False)
    chat = ModelTestResult(
        status="ok", steps=3, completions=24, correct=0, accuracy=0.0, model="embedded-chat", kind="local",
        location="/m", steps_requested=3, format_failures=24, samples=[unread],
    )  # fmt: skip
    result = InferenceTestResult(
        environment="calculator_verifiers", environment_file="c.py", num_steps=3, group_size=8, output_dir="d",
        results=[chat],
    )  # fmt: skip

    assert result.working == [chat] and result.environment_works is False
    assert result.to_dict()["summary"]["environment_works"] is False
    text = str(result)
    assert "environment works" not in text
    assert "does NOT work: every completion scored 0 without a readable answer (24 of 24 format failures" in text
    assert "environment works" not in result._repr_html_().lower()


def test_one_readable_wrong_answer_is_enough_for_a_working_environment() -> None:
    wrong = ModelTestResult(
        status="ok", steps=1, completions=8, correct=0, accuracy=0.0, model="embedded", kind="local",
        location="/m", steps_requested=1, format_failures=7,
    )  # fmt: skip
    result = InferenceTestResult(
        environment="arithmetic", environment_file="a.py", num_steps=1, group_size=8, output_dir="d", results=[wrong]
    )

    assert result.environment_works and "environment works" in str(result)


def test_a_hosted_model_behind_the_gateway_streams_what_it_answers_whole(provider_key: str) -> None:
    # Agent harnesses ask with ``stream: true``; a plain JSON answer would give the SDK zero chunks and no error.
    import openai

    from hermes_nb.model_test.gateway import Gateway

    asked: dict[str, Any] = {"model": SOLVER, "messages": [{"role": "user", "content": "12+34="}], "max_tokens": 8}

    def ask(url: str) -> tuple[Any, list[Any]]:
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        plain = client.chat.completions.create(**asked)
        return plain, list(client.chat.completions.create(**asked, stream=True, stream_options={"include_usage": True}))

    async def through_gateway(provider_url: str) -> tuple[Any, list[Any]]:
        async with Gateway() as gateway:
            settings = EndpointSettings(base_url=provider_url, model=SOLVER, api_key_env=KEY_VAR)
            url = gateway.add_endpoint("hosted", settings, EndpointStats())
            return await asyncio.to_thread(ask, f"{url}/v1")

    with fake_provider(ProviderState(rate_limit_first=False)) as (provider_url, _):
        plain, chunks = asyncio.run(through_gateway(provider_url))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == plain.choices[0].message.content and streamed
    assert chunks[-1].choices == [] and chunks[-1].usage == plain.usage
