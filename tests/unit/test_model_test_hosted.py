"""``rl_test_inference`` against hosted models, with the environment in real child processes and the provider a
real server on loopback (``fake_provider``: text only, ``usage``, one 429 with ``Retry-After`` per model, ``n``
ignored, a chat-only model answering 404 on ``/completions``, the key checked from the ``Authorization`` header).

The shipped environments report the right accuracy for a provider that answers right and for one that answers
wrong; the default model set (small, medium, large and the base model) is used when the key is found; the report
says how to add hosted models when it is not; keys reach no file; a chat-sampling environment works too.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_provider import (
    CHAT_ONLY,
    FAKE_KEY,
    SOLVER,
    TOOL_USER,
    VERBOSE,
    WRONG,
    ProviderState,
    fake_provider,
    right_and_wrong_tested,
    solve,
    use_key,
)

from hermes_nb import api
from hermes_nb.model_test.hosted import HOSTED_MODELS_FILE
from hermes_nb.model_test.runner import rl_test_inference
from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.runs import prices
from hermes_nb.system import home

pytestmark = pytest.mark.timeout(240)

SHIPPED = ("arithmetic", "reverse_string", "sort_letters", "count_letters")

CHAT_ENV = '''
"""Addition asked in a chat: "a+b=" as one user message, sampled through /v1/chat/completions."""
import random

from hermes_nb.env import BaseEnv, QAItem


class ChatSumEnv(BaseEnv):
    name = "chat_sum"

    async def setup(self):
        self.rng = random.Random(0)

    async def get_next_item(self):
        a, b = self.rng.randint(0, 99), self.rng.randint(0, 99)
        return QAItem(prompt=f"{a}+{b}=", answer=str(a + b))

    async def collect_trajectories(self, item):
        messages = [{"role": "user", "content": item.prompt}]
        completions = await self.server.sample_chat(messages, n=self.config.group_size, max_tokens=8)
        scores = [1.0 if c.text.strip() == item.answer else 0.0 for c in completions]
        return self.scored_group(completions, scores), []
'''


@pytest.fixture
def provider_key(monkeypatch: pytest.MonkeyPatch) -> str:
    return use_key(monkeypatch)


def _select(name: str, monkeypatch: pytest.MonkeyPatch, directory: Path | None = None) -> None:
    if directory is not None:
        monkeypatch.setenv("HERMES_NB_ENV_PATH", str(directory))
    asyncio.run(api.rl_select_environment(name))


def _rows(path: str | None) -> list[dict[str, Any]]:
    assert path is not None
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def _files_holding(directory: Path, secret: str) -> list[Path]:
    return [
        p for p in directory.rglob("*") if p.is_file() and secret in p.read_text(encoding="utf-8", errors="replace")
    ]


# ---- accuracy, formats and keys -----------------------------------------------------------------


@pytest.mark.parametrize("environment", SHIPPED)
def test_shipped_environments_score_a_right_provider_fully_and_a_wrong_one_not_at_all(
    environment: str, provider_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _select(environment, monkeypatch)
    with fake_provider() as (url, state):
        result, right, wrong = right_and_wrong_tested(url)
    assert result.best_model == f"{url}#{SOLVER}"
    for model, name in ((right, SOLVER), (wrong, WRONG)):
        rows = _rows(model.output_file)
        assert all(ScoredDataGroup.model_validate(row["group"]).is_test_only() for row in rows)
        texts = [s["completion"] for row in rows for s in row["samples"]]
        assert (model.rate_limited, model.requests) == (1, len(state.calls_of(name)))  # one 429 each, waited out
        assert model.completion_tokens == sum(len(t) for t in texts) and model.prompt_tokens > 0
        assert model.format_failures == 0 and model.mean_latency_s > 0
    assert all(s["completion"] == solve(s["prompt"]) for row in _rows(right.output_file) for s in row["samples"])
    assert not _files_holding(Path(result.output_dir), provider_key)


def test_wordy_answers_are_counted_as_format_failures_with_samples(
    provider_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _select("arithmetic", monkeypatch)
    with fake_provider() as (url, _):
        result = asyncio.run(rl_test_inference(num_steps=1, group_size=2, models=[f"{url}#{VERBOSE}"]))
    [model] = result.results
    assert (model.status, model.accuracy, model.format_failures) == ("ok", 0.0, 2)
    [sample] = model.samples  # both completions are the same text
    assert sample.completion == f"The answer is {solve(sample.prompt or '')}." and not sample.correct


def test_a_hosted_models_tokens_are_priced_by_the_users_table(
    provider_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = {"sample_per_million_tokens": 2.0, "train_per_million_tokens": 0.0, "prompt_per_million_tokens": 0.5,
             "source": "the provider's page", "date": "2026-12-01"}  # fmt: skip
    prices.prices_path().parent.mkdir(parents=True, exist_ok=True)
    prices.prices_path().write_text(yaml.safe_dump({VERBOSE: entry}), encoding="utf-8")
    _select("arithmetic", monkeypatch)
    with fake_provider() as (url, _):
        result = asyncio.run(
            rl_test_inference(num_steps=1, group_size=2, models=[f"{url}#{VERBOSE}", f"{url}#{SOLVER}"])
        )
    priced, unpriced = result.results
    assert priced.prompt_tokens and priced.completion_tokens
    expected = (priced.prompt_tokens * 0.5 + priced.completion_tokens * 2.0) / 1e6
    assert priced.price_usd == pytest.approx(expected)
    assert unpriced.price_usd is None  # no entry for it: no price, never a made-up one
    assert result.to_dict()["models_tested"][0]["price_usd"] == pytest.approx(expected)


def test_a_wrong_key_fails_that_model_and_never_reaches_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    sent = use_key(monkeypatch, "sk-wrong-key-for-the-log-check-42")
    _select("arithmetic", monkeypatch)
    with fake_provider() as (url, _):
        result = asyncio.run(rl_test_inference(num_steps=1, group_size=2, models=[f"{url}#{SOLVER}"]))
    [model] = result.results
    assert model.status == "no_groups" and "401" in (model.error or "")
    assert not _files_holding(Path(result.output_dir), sent)
    assert sent not in json.dumps(result.to_dict()) and sent not in str(result)


def test_a_chat_sampling_environment_is_tested_against_a_text_only_chat_endpoint(
    provider_key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "envs"
    directory.mkdir()
    (directory / "chat_sum.py").write_text(CHAT_ENV, encoding="utf-8")
    _select("chat_sum", monkeypatch, directory)
    with fake_provider() as (url, state):
        result = asyncio.run(rl_test_inference(num_steps=2, group_size=3, models=[f"{url}#{CHAT_ONLY}"]))
    [model] = result.results
    assert (model.status, model.completions, model.accuracy) == ("ok", 6, 1.0), str(result)
    assert {c.path for c in state.calls} == {"chat"}  # the environment's own chat requests, passed on as chat
    assert all(ScoredDataGroup.model_validate(row["group"]).is_test_only() for row in _rows(model.output_file))


def test_the_default_model_set_is_small_medium_large_and_the_base_model_with_the_key_in_hermes_dotenv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user_home = tmp_path / "user"
    (user_home / ".hermes").mkdir(parents=True)
    (user_home / ".hermes" / ".env").write_text(f"OPENROUTER_API_KEY={FAKE_KEY}\n", encoding="utf-8")
    monkeypatch.setenv("HOME", str(user_home))
    # Set then removed, so that the variable load_keys() puts into os.environ is removed again afterwards.
    monkeypatch.setenv("OPENROUTER_API_KEY", "")
    monkeypatch.delenv("OPENROUTER_API_KEY")
    _select("arithmetic", monkeypatch)
    with fake_provider() as (url, state):
        hosted = {"base_url": url, "small": SOLVER, "medium": CHAT_ONLY, "large": WRONG}
        (home.home_dir() / HOSTED_MODELS_FILE).write_text(json.dumps(hosted), encoding="utf-8")  # JSON is YAML
        result = asyncio.run(rl_test_inference(num_steps=1, group_size=2))
    small, medium, large, base = result.results
    assert [(r.model, r.scale) for r in result.results] == [
        (SOLVER, "small"),
        (CHAT_ONLY, "medium"),
        (WRONG, "large"),
        ("embedded", "base"),
    ]
    assert [r.status for r in result.results] == ["ok"] * 4, str(result)
    assert (small.accuracy, medium.accuracy, large.accuracy) == (1.0, 1.0, 0.0)
    assert medium.sent_as_chat and not small.sent_as_chat and not base.sent_as_chat
    assert base.kind == "local" and base.requests >= 1 and base.total_tokens > 0  # counted through the gateway
    assert {c.model for c in state.calls} == {SOLVER, CHAT_ONLY, WRONG}
    text = str(result)
    assert "chat-only model" in text and "1 rate-limited" in text and not result.notes
    assert not _files_holding(Path(result.output_dir), FAKE_KEY)


def test_without_a_key_only_the_base_model_is_tested_and_the_result_says_how_to_add_hosted_models(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", str(home.home_dir()))  # a home without ~/.hermes/.env
    _select("arithmetic", monkeypatch)
    # A timeout too short for the server to start: what matters here is which models were tried.
    result = asyncio.run(rl_test_inference(num_steps=1, group_size=2, timeout_s=0.5))
    assert [(r.model, r.scale, r.status) for r in result.results] == [("embedded", "base", "timed_out")]
    [note] = result.notes
    assert "OPENROUTER_API_KEY" in note and "qwen/qwen3-8b" in note and HOSTED_MODELS_FILE in note
    assert note in str(result) and result.to_dict()["notes"] == [note]


@pytest.mark.parametrize("arguments_as_object", [False, True], ids=["arguments-as-json", "arguments-as-object"])
def test_an_agent_environment_runs_its_tools_on_the_calls_a_hosted_model_makes(
    arguments_as_object: bool, provider_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _select("calculator_agent", monkeypatch)
    with fake_provider(ProviderState(arguments_as_object=arguments_as_object)) as (url, state):
        result = asyncio.run(rl_test_inference(num_steps=2, group_size=2, models=[f"{url}#{TOOL_USER}"]))
    [model] = result.results
    assert (model.status, model.completions, model.accuracy) == ("ok", 4, 1.0), str(result)
    answered = [c for c in state.calls_of(TOOL_USER) if c.status == 200]
    assert len(answered) == 4 * 3  # each episode: a call per step, then the answer
    rows = _rows(model.output_file)
    assert all(ScoredDataGroup.model_validate(row["group"]).is_test_only() for row in rows)
