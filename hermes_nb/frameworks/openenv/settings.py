"""The settings of an OpenEnv environment's episodes: its config as a selection shows it (``env.*`` fields).

OpenEnv's environments have no hermes-nb config of their own: what hermes-nb needs to drive one is how to start
or reach its server, how many turns an episode may take, what the policy is told, how an observation becomes a
message, how a reply becomes an Action, and how per-step rewards become the episode's score.
"""

from __future__ import annotations

from pydantic import Field

from hermes_nb.env.agent import AgentEnvConfig
from hermes_nb.frameworks.openenv.rewards import RewardAggregation


class OpenEnvSettings(AgentEnvConfig):
    """``AgentEnvConfig`` (group size, workers, ``max_turns``, ``max_turn_tokens``, token budget) plus OpenEnv's."""

    server_url: str | None = Field(
        default=None,
        description="An OpenEnv server already running (http://host:port); none: the run starts the file's app.",
    )
    system_prompt: str | None = Field(
        default=None, description="The system message of every episode; none: no system turn."
    )
    observation_field: str | None = Field(
        default=None,
        description="The observation field whose text is the user message; none: its only text field, else its "
        "fields as JSON.",
    )
    action_field: str | None = Field(
        default=None,
        description="The Action field the model's reply fills; none: the Action's only text field (from /schema).",
    )
    reward: RewardAggregation = Field(
        default="sum", description="Per-step rewards to the episode's score: sum (default), last or discounted."
    )
    discount: float = Field(default=0.9, gt=0.0, le=1.0, description="The factor per step for reward=discounted.")
    max_token_length: int = Field(
        default=512, ge=8, le=32768, description="Longest episode (prompt, every turn and tool result), in tokens."
    )
