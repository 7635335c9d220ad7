"""``process``'s rows show what each completion asked and answered, also for an environment that samples through a
client of its own (verifiers' train client renders and samples itself, so the inference client's listeners see
nothing): then the text is its group's conversation, the last question and the final reply."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from hermes_nb.env import BaseEnv, BaseEnvConfig, QAItem
from hermes_nb.env.scoring import TrainedSequence, with_episode_messages
from hermes_nb.env_host.process_command import process
from hermes_nb.model_test.results import read_details
from hermes_nb.protocol.inference import ChatMessage, FunctionCall, ToolCall
from hermes_nb.protocol.trajectory import MASK_IGNORE

QUESTION = "Mia has 23 pens. She buys 4 boxes of 12 pens. How many pens does she have now?"
CALL = ToolCall(id="call_0", function=FunctionCall(name="calculate", arguments='{"expression": "4*12"}'))


class OwnClientEnv(BaseEnv):
    """A two-member group sampled elsewhere: one episode answers after a tool call, one stops at its tool call."""

    async def get_next_item(self) -> Any:
        return QAItem(prompt=QUESTION, answer="71")

    async def collect_trajectories(self, item: Any) -> Any:
        member = TrainedSequence(tokens_T=[5, 6, 7], masks_T=[MASK_IGNORE, 6, 7], logprobs_T=None)
        group = self.scored_group([member, member], [1.0, 0.0])
        asked = [ChatMessage(role="user", content=QUESTION), ChatMessage(role="assistant", tool_calls=[CALL])]
        answered = [*asked, ChatMessage(role="tool", content="48", tool_call_id="call_0")]
        answered.append(ChatMessage(role="assistant", content="71"))
        return with_episode_messages(group, [answered, asked]), []


def test_a_group_sampled_by_the_environments_own_client_shows_its_conversations_last_exchange(
    tmp_path: Path,
) -> None:
    rows = tmp_path / "groups.jsonl"

    asyncio.run(process(OwnClientEnv(BaseEnvConfig()), 1, rows))

    [row] = [json.loads(line) for line in rows.read_text().splitlines()]
    texts = [(sample["prompt"], sample["completion"]) for sample in row["samples"]]
    assert texts == [(QUESTION, "71"), (QUESTION, None)]
    details = read_details(rows)
    assert details.format_failures == 1  # the episode that gave no answer, not the one that answered
