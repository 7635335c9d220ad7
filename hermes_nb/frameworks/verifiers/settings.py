"""The settings of a verifiers environment as a selection shows them (``env.*`` fields).

hermes-nb's own (``BaseEnvConfig``: group size, workers, sizes) plus how a reply is sampled and what the held-out
evaluation loads; the taskset's own config fields join them as ``taskset.<field>`` (verifiers'
``--env.taskset.<field>``), read from the taskset's config class by ``schema_child``. Each episode runs locally:
verifiers' ``subprocess`` runtime and a chat harness (one turn, and one more per tool call), never a remote
sandbox, never a push; ``tool_parser`` says how the train client reads the model's tool calls. An episode's limits
default to ``AgentEnv``'s (turns, tokens a turn), so a task written both ways plays the same episodes.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from hermes_nb.config import BaseEnvConfig
from hermes_nb.env.agent import AgentEnvConfig
from hermes_nb.frameworks.verifiers.handoff import HELD_OUT_SPLIT, SPLIT_FIELD, TASKSET_PREFIX

_AGENT_LIMITS = AgentEnvConfig.model_fields


class VerifiersSettings(BaseEnvConfig):
    # The taskset's own fields ride along as "taskset.<field>" keys (validated by verifiers, in the episodes'
    # process, against the taskset's config class).
    model_config = ConfigDict(extra="allow", validate_assignment=True)

    harness: Literal["hermes_nb_chat", "null"] = Field(
        default="hermes_nb_chat",
        description=(
            "The harness of every episode. hermes_nb_chat: verifiers' null chat loop in the environment's process; "
            "null: verifiers' own, a chat program under uv per episode (~1.8 s of CPU each on two cores)."
        ),
    )
    # A tool call in the Hermes format is ~25 tokens: a smaller cap cuts it, and the turn ends the episode unread.
    max_tokens: int = Field(
        default=_AGENT_LIMITS["max_turn_tokens"].default,
        ge=1,
        le=4096,
        description="Longest reply per turn, in tokens.",
    )
    max_turns: int | None = Field(
        default=_AGENT_LIMITS["max_turns"].default,
        ge=1,
        description="Turns per episode (tool calls included); none: the harness decides (null: until a reply "
        "without tool calls).",
    )
    eval_taskset: dict[str, Any] | None = Field(
        default=None,
        description=(
            f"Taskset fields of the held-out evaluation (e.g. {{{SPLIT_FIELD}: {HELD_OUT_SPLIT}}}); none: "
            f"{{{SPLIT_FIELD}: {HELD_OUT_SPLIT}}} where the taskset's config accepts it, else no evaluation."
        ),
    )
    tool_parser: str | None = Field(
        default="qwen3",
        description=(
            "How the train client reads the model's tool calls (a renderers tool parser; qwen3: the Hermes "
            "<tool_call> JSON format of the shipped chat model); none: verifiers' renderer for the model's name."
        ),
    )
    max_token_length: int = Field(
        default=512, ge=8, le=32768, description="Longest episode (prompt and reply), in tokens."
    )

    def taskset_fields(self) -> dict[str, Any]:
        """The taskset's own config values (``taskset.split`` -> ``split``)."""
        extra = self.model_extra or {}
        return {k.removeprefix(TASKSET_PREFIX): v for k, v in extra.items() if k.startswith(TASKSET_PREFIX)}
