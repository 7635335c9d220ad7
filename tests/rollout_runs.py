"""Fabricated runs with recorded trajectories, written by the trainer's own writer (``record_batch``).

``write_tool_run``: a finished 2-step run whose step 2 has an agent conversation with a tool call and its result
(the messages an agent environment records) and a single-turn group; step 1 is single-turn only, as the QA
environments record it (``with_single_turn_messages``). Used by the unit tests and the browser test.
"""

from __future__ import annotations

from typing import Any

from hermes_nb.env.scoring import with_single_turn_messages
from hermes_nb.env.types import SampledCompletion
from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.protocol.run_state import RunState
from hermes_nb.protocol.trajectory import CORRECT_OVERRIDE, MASK_IGNORE, ScoredDataGroup
from hermes_nb.runs.supervision.state_file import write_run_state
from hermes_nb.system.home import run_paths
from hermes_nb.trainer.run.checkpoints import record_batch

TOOL_RUN = "20260102-000000-toolcallsx"
T0 = 1_700_000_000.0
WEATHER_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
TOOL_RESULT = '{"temp_c": 18}'


def _conversation(answer: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": TOOL_RESULT},
        {"role": "assistant", "content": answer},
    ]


def agent_group() -> ScoredDataGroup:
    """Two episodes: a right final answer (score 1) and a wrong one (score 0)."""
    tokens = [[5, 6, 7, 8, 9], [5, 6, 7, 10, 11]]
    return ScoredDataGroup(
        tokens=tokens,
        masks=[[MASK_IGNORE, MASK_IGNORE, 7, MASK_IGNORE, 9], [MASK_IGNORE, MASK_IGNORE, 7, MASK_IGNORE, 11]],
        scores=[1.0, 0.0],
        messages=[_conversation("It is 18 C in Paris."), _conversation("It is 30 C in Paris.")],
        overrides=[{CORRECT_OVERRIDE: True}, {CORRECT_OVERRIDE: False}],
    )


def qa_group(prompt: str, answers: list[str], scores: list[float]) -> ScoredDataGroup:
    completions = [
        SampledCompletion(text=a, prompt_token_ids=[20, 21], token_ids=[22, 23], logprobs=None, finish_reason="stop")
        for a in answers
    ]
    group = ScoredDataGroup(
        tokens=[[20, 21, 22, 23] for _ in answers],
        masks=[[MASK_IGNORE, MASK_IGNORE, 22, 23] for _ in answers],
        scores=scores,
    )
    filled = with_single_turn_messages(group, prompt, completions)
    assert filled is not None
    return filled


def write_tool_run(run_id: str = TOOL_RUN) -> RunPaths:
    paths = run_paths(run_id)
    paths.run_dir.mkdir(parents=True, exist_ok=True)
    state = {"run_id": run_id, "environment": "weather", "status": "completed", "created_at": T0, "total_steps": 2}
    write_run_state(paths.run_dir, RunState.model_validate({**state, "started_at": T0, "ended_at": T0 + 10}))
    record_batch(paths.run_dir, 1, [qa_group("2+2=", ["4", "5", "22"], [1.0, 0.0, 0.5])])
    record_batch(paths.run_dir, 2, [agent_group(), qa_group("3+3=", ["6", "7"], [1.0, 0.0])])
    return paths
