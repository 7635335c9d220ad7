"""``process``: run N groups of an environment without a trajectory API and write them to a JSONL to read.

Each line holds the scored group exactly as it would be sent to the trainer, plus what a person needs to judge
it: the item, and each completion's prompt, text, score and verdict. Text comes from what the inference server
sampled (matched to the group's token ids), so no tokenizer is loaded here.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from hermes_nb.env.base import BaseEnv
from hermes_nb.env.types import Item, SampledCompletion
from hermes_nb.env_host import faults
from hermes_nb.errors import HermesNBError
from hermes_nb.protocol.trajectory import ScoredDataGroup, last_exchange

logger = logging.getLogger(__name__)

# An environment may return None for a group (nothing to learn from); give it this many tries per wanted
# group before concluding it will not produce N groups.
MAX_ATTEMPTS_PER_GROUP = 5


class ProcessSummary(BaseModel):
    groups: int
    completions: int
    correct: int
    accuracy: float
    skipped: int = 0
    failed: int = 0
    seconds: float
    output_path: str


class _Recorder:
    """Remembers what the server sampled, keyed by the full token sequence a group row will hold.

    Completions read from a text-only endpoint's text can share a key although their texts differ (characters
    the run's tokenizer does not know all read as one unknown token), so each key keeps its completions in
    sampling order and a row takes the oldest, the last one staying for rows that repeat it.
    """

    def __init__(self) -> None:
        self.by_tokens: dict[tuple[int, ...], deque[tuple[str, SampledCompletion]]] = defaultdict(deque)

    def __call__(self, prompt: str, completions: list[SampledCompletion]) -> None:
        for completion in completions:
            self.by_tokens[(*completion.prompt_token_ids, *completion.token_ids)].append((prompt, completion))

    def take(self, tokens: list[int]) -> tuple[str | None, SampledCompletion | None]:
        waiting = self.by_tokens.get(tuple(tokens))
        if not waiting:
            return None, None
        return waiting.popleft() if len(waiting) > 1 else waiting[0]


async def process(env: BaseEnv, num_groups: int, output_path: str | Path) -> ProcessSummary:
    """Collect ``num_groups`` groups (backlog items first) and write one JSON line per group.

    Every group is kept, including those whose scores are all equal: this is for looking at, not training.
    """
    if num_groups < 1:
        raise HermesNBError(f"--num-groups: must be at least 1 (got {num_groups})")
    output = Path(output_path)
    output.parent.mkdir(parents=True, exist_ok=True)
    env.config.ensure_scores_are_not_same = False
    recorder = _Recorder()
    env.server.sample_listeners.append(recorder)
    started = time.monotonic()
    try:
        await env.setup()
        with output.open("w", encoding="utf-8") as handle:
            counts = await _collect(env, num_groups, handle, recorder)
    finally:
        env.server.sample_listeners.remove(recorder)
    return _summary(counts, time.monotonic() - started, output)


async def _collect(env: BaseEnv, num_groups: int, handle: Any, recorder: _Recorder) -> dict[str, Any]:
    counts: dict[str, Any] = {"groups": 0, "scores": [], "correct": [], "skipped": 0, "failed": 0}
    backlog: list[Item] = []
    consecutive_failures = 0
    # As in serve: the environment's own limits on one group's time and on failures in a row.
    timeout, failure_limit = env.config.worker_timeout, env.config.max_consecutive_failures
    for _ in range(num_groups * MAX_ATTEMPTS_PER_GROUP):
        if counts["groups"] >= num_groups:
            break
        try:
            item = backlog.pop(0) if backlog else await env.get_next_item()
            result, extra = await faults.collect(env, item, timeout)
        except Exception as exc:
            logger.exception("group %d failed", counts["groups"])
            counts["failed"] += 1
            consecutive_failures += 1
            if consecutive_failures >= failure_limit:
                raise HermesNBError(
                    f"{consecutive_failures} groups failed in a row (last: {exc}; env.max_consecutive_failures = "
                    f"{failure_limit})"
                ) from exc
            continue
        consecutive_failures = 0
        backlog.extend(extra)
        if result is None:
            counts["skipped"] += 1
            continue
        group = result if isinstance(result, ScoredDataGroup) else ScoredDataGroup.model_validate(result)
        if getattr(env.server, "text_only_answers", 0):
            # Built after text-only answers, whether or not the environment said so: never to be trained on.
            group = group.as_test_only()
        handle.write(json.dumps(_row(counts["groups"], item, group, recorder)) + "\n")
        handle.flush()
        counts["groups"] += 1
        counts["scores"].extend(group.scores)
        counts["correct"].extend(group.verdicts())
    return counts


def _row(index: int, item: Item, group: ScoredDataGroup, recorder: _Recorder) -> dict[str, Any]:
    samples = []
    for member, (tokens, score, correct) in enumerate(zip(group.tokens, group.scores, group.verdicts(), strict=True)):
        prompt, completion = recorder.take(tokens)
        texts = {"prompt": prompt, "completion": completion.text if completion else None}
        if completion is None and group.messages:
            # Sampled by the environment's own client (verifiers'): the conversation it sent says what was asked
            # and answered.
            texts = last_exchange(group.messages[member])
        samples.append(
            {
                **texts,
                "finish_reason": completion.finish_reason if completion else None,
                "score": score,
                "correct": correct,
            }
        )
    return {
        "index": index,
        "item": _jsonable(item),
        "scores": group.scores,
        "samples": samples,
        "group": group.model_dump(mode="json", exclude_none=True),
    }


def _jsonable(item: Item) -> Any:
    if isinstance(item, BaseModel):
        return item.model_dump(mode="json")
    try:
        json.dumps(item)
    except (TypeError, ValueError):
        return repr(item)
    return item


def _summary(counts: dict[str, Any], seconds: float, output: Path) -> ProcessSummary:
    scores = counts["scores"]
    correct = sum(counts["correct"])
    return ProcessSummary(
        groups=counts["groups"],
        completions=len(scores),
        correct=correct,
        accuracy=correct / len(scores) if scores else 0.0,
        skipped=counts["skipped"],
        failed=counts["failed"],
        seconds=round(seconds, 3),
        output_path=str(output),
    )
