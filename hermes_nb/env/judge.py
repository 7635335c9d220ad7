"""Model-judged scores: a judge model scores completions where no checker can decide.

``Judge`` talks to any OpenAI-compatible ``/chat/completions`` endpoint, given as an ``APIServerConfig``: a hosted
model (its key named by ``api_key_env``, read from the environment or ``~/.hermes/.env``), a model served by
``python -m hermes_nb.processes.inference_server``, or the run's own policy (the environment's first server,
the default). Two ways to ask:

- ``score`` (absolute): one completion against a rubric; the judge answers ``{"score": s, "reason": "..."}``.
- ``rank`` (relative, as ART's RULER): a whole group at once; the judge answers
  ``{"scores": [{"index": i, "score": s, "reason": "..."}, ...]}``, one entry per completion.

Scores are clamped to ``[0, 1]``. A call that fails after ``retries`` (network error, 5xx, timeout) or an answer
that is not that JSON raises ``JudgeError``: raised from ``collect_trajectories`` it is a failed group, counted
like any environment fault (``env/failed_groups``), never a crash. Calls and tokens are counted for the run's
cost (``metrics``: ``env/judge_calls``, ``env/judge_prompt_tokens``, ``env/judge_completion_tokens``).
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Any

import httpx

from hermes_nb.env.server_config import APIServerConfig
from hermes_nb.errors import HermesNBError
from hermes_nb.protocol.metrics import JUDGE_CALLS, JUDGE_COMPLETION_TOKENS, JUDGE_PROMPT_TOKENS
from hermes_nb.protocol.trajectory import JUDGE_REASON_OVERRIDE, ScoredDataGroup

# Enough for a score and a sentence of reason per completion of a group of 16.
JUDGE_MAX_TOKENS = 1024
# Seconds before the second try; doubled for each one after (a rate-limited provider recovers in seconds).
RETRY_DELAY_S = 0.5

ABSOLUTE_INSTRUCTIONS = (
    "You are a strict judge. Score the assistant's answer to the task against the rubric, from 0 (fails it) to 1 "
    '(meets it fully). Answer with JSON only: {"score": <number>, "reason": "<one sentence>"}.'
)
RELATIVE_INSTRUCTIONS = (
    "You are a strict judge. Several answers to one task follow, numbered from 0. Compare them against the rubric "
    "and score each from 0 (worst) to 1 (best), so better answers score higher. Answer with JSON only: "
    '{"scores": [{"index": <n>, "score": <number>, "reason": "<one sentence>"}, ...]}, one entry per answer.'
)


class JudgeError(HermesNBError):
    """The judge could not score a group: its endpoint failed, or its answer was not the JSON asked for."""


@dataclass(frozen=True)
class Verdict:
    """The judge's score of one completion, in [0, 1], and its reason in its own words."""

    score: float
    reason: str


class Judge:
    """Scores completions with a judge model (module doc). ``transport`` is for tests (an in-process server)."""

    def __init__(
        self, endpoint: APIServerConfig, *, retries: int = 2, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.endpoint = endpoint
        self.retries = retries
        self._transport = transport
        self.calls = self.prompt_tokens = self.completion_tokens = 0
        # An evaluation asks about every held-out item at once; a hosted judge takes only so many together.
        self._limit = asyncio.Semaphore(endpoint.num_max_requests_at_once)

    async def score(self, task: str, completion: str, rubric: str) -> Verdict:
        """The judge's absolute score of ``completion`` as an answer to ``task``, against ``rubric``."""
        user = f"Rubric:\n{rubric}\n\nTask:\n{task}\n\nAnswer:\n{completion}"
        answer = await self._ask(ABSOLUTE_INSTRUCTIONS, user)
        return _verdict(answer)

    async def rank(self, task: str, completions: list[str], rubric: str) -> list[Verdict]:
        """The judge's scores of a group of answers to ``task``, compared with each other (RULER's way)."""
        numbered = "\n\n".join(f"Answer {i}:\n{text}" for i, text in enumerate(completions))
        answer = await self._ask(RELATIVE_INSTRUCTIONS, f"Rubric:\n{rubric}\n\nTask:\n{task}\n\n{numbered}")
        return _ranked(answer, len(completions))

    def metrics(self) -> dict[str, float]:
        """The judge's calls and tokens so far, for ``wandb_log``."""
        return {
            JUDGE_CALLS: float(self.calls),
            JUDGE_PROMPT_TOKENS: float(self.prompt_tokens),
            JUDGE_COMPLETION_TOKENS: float(self.completion_tokens),
        }

    async def _ask(self, system: str, user: str) -> dict[str, Any]:
        """The judge's answer parsed as a JSON object; ``JudgeError`` once every try has failed."""
        request = {
            "model": self.endpoint.model_name,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "temperature": 0.0,
            "max_tokens": JUDGE_MAX_TOKENS,
        }
        for attempt in range(self.retries + 1):
            try:
                return self._answer(await self._post(request))
            except (httpx.HTTPError, _Retryable) as exc:
                if attempt == self.retries:
                    raise JudgeError(f"judge {self.endpoint.base_url}: {exc} (after {attempt + 1} tries)") from None
                await asyncio.sleep(RETRY_DELAY_S * 2**attempt)
        raise AssertionError("unreachable: the last try returns or raises")

    async def _post(self, request: dict[str, Any]) -> dict[str, Any]:
        async with self._limit, httpx.AsyncClient(transport=self._transport, timeout=self.endpoint.timeout) as client:
            response = await client.post(
                f"{self.endpoint.base_url.rstrip('/')}/chat/completions", json=request, headers=self._headers()
            )
        self.calls += 1
        if response.status_code >= 500 or response.status_code == 429:
            raise _Retryable(f"HTTP {response.status_code}")
        if response.status_code >= 400:
            raise JudgeError(f"judge {self.endpoint.base_url}: HTTP {response.status_code}: {response.text[:200]}")
        body: dict[str, Any] = response.json()
        return body

    def _headers(self) -> dict[str, str]:
        var = self.endpoint.api_key_env
        if var is None:
            return {}
        from hermes_nb.system.home import load_keys

        load_keys()  # a hosted judge's key from ~/.hermes/.env, never written anywhere
        key = os.environ.get(var)
        if not key:
            raise JudgeError(f"judge: {var} is not set; put {var}=... in ~/.hermes/.env or the environment")
        return {"Authorization": f"Bearer {key}"}

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        usage = body.get("usage") or {}
        self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.completion_tokens += int(usage.get("completion_tokens") or 0)
        try:
            content = body["choices"][0]["message"]["content"]
            parsed = json.loads(_unfenced(str(content)))
        except (KeyError, IndexError, TypeError, ValueError):
            raise JudgeError(f"judge {self.endpoint.base_url}: the answer is not the JSON asked for") from None
        if not isinstance(parsed, dict):
            raise JudgeError(f"judge {self.endpoint.base_url}: the answer is not a JSON object")
        return parsed


def with_judge_reasons(group: ScoredDataGroup | None, verdicts: list[Verdict]) -> ScoredDataGroup | None:
    """``group`` with each member's judge reason in its ``overrides`` (what the rollout viewer shows)."""
    if group is None:
        return None
    overrides = group.overrides or [{} for _ in verdicts]
    merged = [{**o, JUDGE_REASON_OVERRIDE: v.reason} for o, v in zip(overrides, verdicts, strict=True)]
    return group.model_copy(update={"overrides": merged})


class _Retryable(Exception):
    """A failure worth another try (5xx, 429)."""


def _unfenced(content: str) -> str:
    """The JSON of an answer, without the Markdown code fence some models wrap it in."""
    text = content.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    return text


def _verdict(answer: dict[str, Any]) -> Verdict:
    score = answer.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise JudgeError(f"judge: the answer has no numeric score ({str(answer)[:200]})")
    return Verdict(min(1.0, max(0.0, float(score))), str(answer.get("reason", "")))


def _ranked(answer: dict[str, Any], size: int) -> list[Verdict]:
    entries = answer.get("scores")
    if not isinstance(entries, list) or len(entries) != size:
        raise JudgeError(f"judge: expected {size} scores, one per answer ({str(answer)[:200]})")
    by_index: dict[int, Verdict] = {}
    for entry in entries:
        index = entry.get("index") if isinstance(entry, dict) else None
        if not isinstance(index, int) or not 0 <= index < size or index in by_index:
            raise JudgeError(f"judge: scores must name each answer's index 0-{size - 1} once ({str(answer)[:200]})")
        by_index[index] = _verdict(entry)
    return [by_index[i] for i in range(size)]
