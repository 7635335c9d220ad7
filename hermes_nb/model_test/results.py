"""What ``rl_test_inference`` answers: per model accuracy, format failures, latency, tokens, provider trouble and
a few sampled completions; as text, as HTML (a table and a small bar chart, what ``%rl_test`` shows) and as the
JSON the agent tool returns (the Hermes RL tool's keys, plus these).

Whether a completion is correct is the environment's verdict carried by its group
(``ScoredDataGroup.verdicts``), read here and by the runner's counts alike.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from hermes_nb.protocol.health import format_usd
from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.results import Result, html_table

Status = Literal["ok", "no_groups", "env_failed", "server_failed", "endpoint_failed", "timed_out"]

# Sampled completions shown per model: enough to see what right and wrong answers look like.
SAMPLES_PER_MODEL = 4
# Longest prompt or completion text kept in a sample.
SAMPLE_CHARS = 200
# Width of a full bar in the text form (100%).
TEXT_BAR_WIDTH = 10
# A wrong completion that ended like this gave no answer to parse.
NO_ANSWER_FINISH = frozenset({"length", "content_filter"})


class Outcome(BaseModel):
    """How one model's test ended, and what it counted before that."""

    status: Status
    error: str | None = None
    steps: int = 0  # scored groups written
    completions: int = 0
    correct: int = 0
    accuracy: float = 0.0
    step_success_rate: float = 0.0  # steps / steps_requested


class SampledAnswer(BaseModel):
    """One completion as the environment scored it."""

    prompt: str | None
    completion: str | None
    score: float
    correct: bool
    finish_reason: str | None = None


class StepDetail(BaseModel):
    """One scored group, as the Hermes RL tool listed its steps."""

    step: int
    completions: int
    correct: int
    scores: list[float]


class Details(BaseModel):
    """What a model's groups file shows beyond the counts."""

    steps: list[StepDetail] = Field(default_factory=list)
    # Judged wrong for want of a readable answer, not for a wrong one: empty, cut off, refused, or holding the
    # expected answer in another form ("12+34=46" for "46"). A high count points at the prompt or the parser.
    format_failures: int = 0
    samples: list[SampledAnswer] = Field(default_factory=list)


class ModelTestResult(Outcome):
    """What one model did on the environment."""

    model: str  # the reference as given (a hosted model's id for the default set)
    kind: Literal["local", "endpoint"]
    location: str  # model directory or endpoint URL (never a key)
    scale: str | None = None  # small / medium / large / base in the default model set
    steps_requested: int
    seconds: float = 0.0
    output_file: str | None = None
    log_file: str | None = None  # the environment's log
    server_log: str | None = None  # the temporary inference server's log (local models)
    format_failures: int = 0  # see Details.format_failures
    sent_as_chat: bool = False  # a chat-only model: plain-completion prompts went as one user message
    requests: int = 0  # HTTP requests to the model (its provider, or its local server)
    rate_limited: int = 0  # 429 answers, each waited out
    timeouts: int = 0
    server_errors: int = 0  # 5xx answers and dropped connections
    refusals: int = 0  # completions refused by a content filter
    empty_answers: int = 0  # completions answered with no text
    failed_completions: int = 0  # completions given up on after retries (scored as empty answers)
    prompt_tokens: int = 0  # as the model's usage counts them
    completion_tokens: int = 0
    # A hosted model's tokens by the user's price table (``runs/prices.py``); None: no entry, or a local model.
    price_usd: float | None = None
    mean_latency_s: float = 0.0  # per answered request
    step_details: list[StepDetail] = Field(default_factory=list)
    samples: list[SampledAnswer] = Field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.status == "ok"

    @property
    def unreadable(self) -> bool:
        """Every completion was a format failure: wrong for want of a readable answer, never for a wrong one."""
        return self.completions > 0 and self.correct == 0 and self.format_failures >= self.completions

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def trouble(self) -> str:
        """The provider's problems, counted, e.g. ``1 rate-limited, 2 timeouts``; empty when none."""
        counts = [
            (self.rate_limited, "rate-limited"),
            (self.timeouts, "timeouts"),
            (self.server_errors, "server errors"),
            (self.refusals, "refused"),
            (self.empty_answers, "empty"),
            (self.failed_completions, "given up"),
        ]
        return ", ".join(f"{n} {what}" for n, what in counts if n)


class InferenceTestResult(Result):
    environment: str
    environment_file: str
    num_steps: int
    group_size: int
    output_dir: str
    results: list[ModelTestResult] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # e.g. how to add hosted models when no key was found

    @property
    def working(self) -> list[ModelTestResult]:
        """Models that produced at least one scored group."""
        return [r for r in self.results if r.steps > 0]

    @property
    def models_succeeded(self) -> int:
        return sum(1 for r in self.results if r.succeeded)

    @property
    def best_model(self) -> str | None:
        working = self.working
        return max(working, key=lambda r: r.accuracy).model if working else None

    @property
    def average_accuracy(self) -> float:
        working = self.working
        return round(sum(r.accuracy for r in working) / len(working), 4) if working else 0.0

    @property
    def environment_works(self) -> bool:
        """Some model produced a scored group with a readable answer in it: a group whose every completion is a
        format failure says the environment cannot read what it asks for (prompt, reply length, parser)."""
        return any(not r.unreadable for r in self.working)

    def summary(self) -> dict[str, Any]:
        return {
            "steps_requested": self.num_steps,
            "models_tested": len(self.results),
            "models_succeeded": self.models_succeeded,
            "best_model": self.best_model,
            "avg_accuracy": self.average_accuracy,
            "environment_working": self.environment_works,
            "environment_works": self.environment_works,
            "output_directory": self.output_dir,
            "total_requests": sum(r.requests for r in self.results),
            "total_tokens": sum(r.total_tokens for r in self.results),
        }

    def _dict(self) -> dict[str, Any]:
        rollouts = self.num_steps * self.group_size
        return {
            "environment": self.environment,
            "environment_file": self.environment_file,
            "test_config": {
                "num_steps": self.num_steps,
                "group_size": self.group_size,
                "rollouts_per_model": rollouts,
                "total_rollouts": rollouts * len(self.results),
            },
            "total_models": len(self.results),
            "successful_models": self.models_succeeded,
            "models_tested": [_model_dict(r) for r in self.results],
            "summary": self.summary(),
            "notes": self.notes,
        }

    def _text_lines(self) -> list[str]:
        lines = [
            f"inference test of {self.environment}: {self.num_steps} steps x {self.group_size} completions per model"
        ]
        rows = [[r.model, r.scale or "", r.status, _text_bar(r.accuracy), *_figures(r)] for r in self.results]
        lines += ["  " + line for line in _aligned([list(HEADERS), *rows])]
        lines += _remarks(self.results)
        verdict = self._verdict()
        lines.append(
            f"environment {verdict}; best model: {self.best_model}; average accuracy {self.average_accuracy:.1%}"
        )
        lines += [f"note: {note}" for note in self.notes]
        lines.append(f"files: {self.output_dir}")
        return lines

    def _verdict(self) -> str:
        """Whether the environment works, and if not, why."""
        if self.environment_works:
            return "works"
        if not self.working:
            return "does NOT work (no model produced a scored group)"
        failures = sum(r.format_failures for r in self.working)
        completions = sum(r.completions for r in self.working)
        return (
            f"does NOT work: every completion scored 0 without a readable answer ({failures} of {completions} "
            "format failures: empty, cut off or not in the asked-for form); see the samples, and check the prompt, "
            "the reply length and the answer parser"
        )

    def _html_body(self) -> str:
        head = f"<p>Environment {html.escape(self._verdict())}; best model: {html.escape(str(self.best_model))}</p>"
        remarks = "".join(f"<li>{html.escape(line.strip())}</li>" for line in _remarks(self.results))
        notes = "".join(f"<p><i>{html.escape(note)}</i></p>" for note in self.notes)
        return (
            head
            + _html_table(self.results)
            + _html_bars(self.results)
            + (f"<ul>{remarks}</ul>" if remarks else "")
            + notes
        )


HEADERS = ("model", "scale", "status", "accuracy", "format", "latency", "tokens", "requests", "trouble")


def _figures(r: ModelTestResult) -> list[str]:
    """The columns after accuracy: format failures, latency, tokens, requests, provider trouble."""
    return [
        f"{r.format_failures}/{r.completions}",
        f"{r.mean_latency_s:.2f} s" if r.requests else "-",
        _tokens_cell(r),
        str(r.requests),
        r.trouble,
    ]


def _tokens_cell(r: ModelTestResult) -> str:
    """Tokens spent, and what they cost where the user's price table has the model."""
    if not r.requests:
        return "-"
    return f"{r.total_tokens:,}" + ("" if r.price_usd is None else f" ({format_usd(r.price_usd)})")


def _text_bar(accuracy: float) -> str:
    filled = round(accuracy * TEXT_BAR_WIDTH)
    return "#" * filled + "." * (TEXT_BAR_WIDTH - filled) + f" {accuracy:6.1%}"


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def _remarks(results: list[ModelTestResult]) -> list[str]:
    """Per model: errors, the chat-only note, and the sampled completions."""
    lines: list[str] = []
    for r in results:
        if r.error:
            lines.append(f"  {r.model}: error: {_first_line(r.error)}")
        if r.sent_as_chat:
            lines.append(f"  {r.model}: chat-only model: each plain-completion prompt was sent as one user message")
        lines += [f"  {r.model}: {_sample_line(s)}" for s in r.samples]
    return lines


def _sample_line(sample: SampledAnswer) -> str:
    verdict = "correct" if sample.correct else "wrong"
    return f"{sample.prompt!r} -> {sample.completion!r} (score {sample.score:g}, {verdict})"


def _html_table(results: list[ModelTestResult]) -> str:
    rows = [
        [r.model, r.scale or "", r.status, f"{r.accuracy:.1%} ({r.correct}/{r.completions})", *_figures(r)]
        for r in results
    ]
    return html_table(list(HEADERS), rows)


def _html_bars(results: list[ModelTestResult]) -> str:
    """Accuracy per model as horizontal bars: the small chart ``%rl_test`` shows under the table."""
    rows = ""
    for r in results:
        width = round(r.accuracy * 100)
        bar = f"<div style='background:#4c78a8;height:0.9em;width:{width}%'></div>"
        rows += (
            f"<tr><td style='padding-right:0.5em'>{html.escape(r.model)}</td>"
            f"<td style='width:16em;background:#eee'>{bar}</td><td>{r.accuracy:.0%}</td></tr>"
        )
    return f"<p><b>accuracy</b></p><table class='hermes-nb-bars'>{rows}</table>"


def _first_line(text: str | None) -> str:
    return text.splitlines()[0] if text else ""


def _model_dict(r: ModelTestResult) -> dict[str, Any]:
    """The per-model keys of the Hermes RL tool's answer, so code written for that tool reads them, plus ours."""
    return {
        "model": r.model,
        "name": r.model,
        "scale": r.scale or "custom",
        "kind": r.kind,
        "location": r.location,
        "status": r.status,
        "steps": [step.model_dump() for step in r.step_details],
        "steps_tested": r.steps,
        "steps_requested": r.steps_requested,
        "steps_with_correct": sum(1 for step in r.step_details if step.correct),
        "total_completions": r.completions,
        "correct_completions": r.correct,
        "accuracy": r.accuracy,
        "step_success_rate": r.step_success_rate,
        "format_failures": r.format_failures,
        "mean_latency_s": r.mean_latency_s,
        "requests": r.requests,
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "total_tokens": r.total_tokens,
        "price_usd": r.price_usd,
        "rate_limited": r.rate_limited,
        "timeouts": r.timeouts,
        "server_errors": r.server_errors,
        "refusals": r.refusals,
        "empty_answers": r.empty_answers,
        "failed_completions": r.failed_completions,
        "sent_as_chat": r.sent_as_chat,
        "samples": [sample.model_dump() for sample in r.samples],
        "seconds": r.seconds,
        "output_file": r.output_file,
        "log_file": r.log_file,
        "server_log": r.server_log,
        "error": r.error,
    }


# ---- reading a model's groups file ---------------------------------------------------------------------------


def read_details(path: Path) -> Details:
    """Steps, format failures and a few samples of a process-mode JSONL; a torn or foreign line is skipped."""
    details = Details()
    if not path.is_file():
        return details
    answers: list[SampledAnswer] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
            verdicts = ScoredDataGroup.model_validate(row["group"]).verdicts()
        except (ValueError, KeyError, TypeError):
            continue  # ValidationError is a ValueError
        row_answers = _answers(row, verdicts)
        expected = _expected_answer(row)
        details.format_failures += sum(1 for a in row_answers if _format_failure(a, expected))
        details.steps.append(
            StepDetail(
                step=len(details.steps) + 1,
                completions=len(verdicts),
                correct=sum(verdicts),
                scores=row.get("scores", []),
            )
        )
        answers += row_answers
    details.samples = _pick_samples(answers)
    return details


def _answers(row: dict[str, Any], verdicts: list[bool]) -> list[SampledAnswer]:
    samples = row.get("samples") or [{} for _ in verdicts]
    scores = row.get("scores") or [0.0 for _ in verdicts]
    return [
        SampledAnswer(
            prompt=_short(sample.get("prompt")),
            completion=_short(sample.get("completion")),
            score=float(score),
            correct=correct,
            finish_reason=sample.get("finish_reason"),
        )
        for sample, score, correct in zip(samples, scores, verdicts, strict=False)
    ]


def _expected_answer(row: dict[str, Any]) -> str | None:
    """The item's reference answer where the item carries one (``QAItem.answer``)."""
    item = row.get("item")
    answer = item.get("answer") if isinstance(item, dict) else None
    return answer.strip() if isinstance(answer, str) and answer.strip() else None


def _format_failure(answer: SampledAnswer, expected: str | None) -> bool:
    if answer.correct:
        return False
    text = (answer.completion or "").strip()
    if not text or answer.finish_reason in NO_ANSWER_FINISH:
        return True
    # The expected answer standing on its own inside a longer text: known, but not in the asked-for form.
    return expected is not None and text != expected and bool(_standalone(expected).search(text))


def _standalone(expected: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w]){re.escape(expected)}(?![\w])")


def _pick_samples(answers: list[SampledAnswer]) -> list[SampledAnswer]:
    """Up to ``SAMPLES_PER_MODEL`` distinct completions: half right, half wrong where both exist."""
    half = SAMPLES_PER_MODEL // 2
    right = _distinct([a for a in answers if a.correct])
    wrong = _distinct([a for a in answers if not a.correct])
    chosen = right[:half] + wrong[:half]
    extra = (right[half:] + wrong[half:])[: SAMPLES_PER_MODEL - len(chosen)]
    return chosen + extra


def _distinct(answers: list[SampledAnswer]) -> list[SampledAnswer]:
    seen: set[tuple[str | None, str | None]] = set()
    unique = []
    for answer in answers:
        if (answer.prompt, answer.completion) not in seen:
            seen.add((answer.prompt, answer.completion))
            unique.append(answer)
    return unique


def _short(text: Any) -> str | None:
    if text is None:
        return None
    text = str(text)
    return text if len(text) <= SAMPLE_CHARS else text[: SAMPLE_CHARS - 1] + "…"
