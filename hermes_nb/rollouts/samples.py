"""``SampleView``: what ``rl_get_samples`` answers — the chosen samples of one step, with text and HTML forms."""

from __future__ import annotations

import html
from typing import Any, Literal

from pydantic import BaseModel

from hermes_nb.results import Result
from hermes_nb.rollouts.render import conversation_html, conversation_lines

# Enough to compare good and bad answers at a glance without flooding a notebook cell.
DEFAULT_SAMPLES = 8
# ``recorded``: in the order the trainer received them; ``worst`` / ``best``: by score, lowest / highest first.
SampleOrder = Literal["recorded", "worst", "best"]
_ORDER_WORDS = {"recorded": "as recorded", "worst": "worst first", "best": "best first"}


class Sample(BaseModel):
    """One member of a trained group: its conversation (or, when none was recorded, only its token counts)."""

    step: int
    group: int  # index of the group in the step's batch
    member: int  # index in the group
    score: float
    correct: bool
    # The mean of its per-token advantages over the trained tokens, as the trainer recorded them (one value per
    # sequence unless the environment sent per-token ones); None for a batch recorded without them.
    advantage: float | None
    messages: list[dict[str, Any]] | None  # None: no text recorded and no tokenizer to decode the tokens
    decoded: bool = False  # the messages are the token ids decoded (prompt, completion), not recorded ones
    prompt_tokens: int
    completion_tokens: int  # trained tokens
    # Why a judge model gave the score (hermes_nb.env.judge), when one scored it.
    judge_reason: str | None = None

    @property
    def label(self) -> str:
        verdict = "correct" if self.correct else "wrong"
        source = " (text decoded from token ids)" if self.decoded else ""
        return (
            f"step {self.step} group {self.group} #{self.member}: score {self.score:.3g} ({verdict}), "
            f"advantage {'–' if self.advantage is None else f'{self.advantage:+.3f}'}{source}"
            + (f"; judge: {self.judge_reason}" if self.judge_reason else "")
        )


class SampleView(Result):
    """The samples of ``step`` of a run, filtered and ordered as asked."""

    run_id: str
    step: int
    steps: list[int]  # every step with recorded samples, for choosing another
    order: SampleOrder
    total: int  # samples at this step before filtering and the limit
    score_range: tuple[float, float]  # the lowest and highest score at this step, before filtering
    samples: list[Sample]

    def _header(self) -> str:
        shown = f"{len(self.samples)} of {self.total} samples" if len(self.samples) != self.total else "all samples"
        first, last = self.steps[0], self.steps[-1]
        return (
            f"run {self.run_id}, step {self.step} (steps {first}-{last} recorded): {shown}, {_ORDER_WORDS[self.order]}"
        )

    def _text_lines(self) -> list[str]:
        lines = [self._header()]
        for sample in self.samples:
            lines.append(sample.label)
            lines += conversation_lines(sample.messages) if sample.messages else [_no_text(sample)]
        return lines

    def _html_body(self) -> str:
        cards = "".join(_sample_html(s) for s in self.samples) or "<i>no samples match</i>"
        return f"<div><b>{html.escape(self._header())}</b></div>{cards}"


def _no_text(sample: Sample) -> str:
    return (
        f"  (no text recorded: {sample.prompt_tokens} prompt and {sample.completion_tokens} completion tokens; "
        "the environment sent no messages and the run's tokenizer is not available)"
    )


def _sample_html(sample: Sample) -> str:
    colour = "#2e7d32" if sample.correct else "#c62828"
    head = f"<div style='color:{colour};font-weight:bold;font-size:12px'>{html.escape(sample.label)}</div>"
    body = conversation_html(sample.messages) if sample.messages else f"<i>{html.escape(_no_text(sample).strip())}</i>"
    return (
        "<div class='hermes-nb-sample' style='border:1px solid #ddd;border-left:4px solid "
        f"{colour};margin:6px 0;padding:4px 8px'>{head}{body}</div>"
    )
