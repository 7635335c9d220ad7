"""The environment author API: subclass ``BaseEnv``, configure with ``BaseEnvConfig``, return ``ScoredDataGroup``."""

from hermes_nb.config import LOCKED_ENV_FIELDS, BaseEnvConfig
from hermes_nb.env.agent import AgentEnv, AgentEnvConfig
from hermes_nb.env.base import BaseEnv
from hermes_nb.env.chat_render import ChatRenderer
from hermes_nb.env.episodes import Episode
from hermes_nb.env.qa import QAEnv
from hermes_nb.env.scoring import TrainedSequence, build_scored_group
from hermes_nb.env.server_config import APIServerConfig
from hermes_nb.env.types import Item, QAItem, SampledBatch, SampledCompletion
from hermes_nb.protocol.trajectory import ScoredDataGroup

__all__ = [
    "LOCKED_ENV_FIELDS",
    "APIServerConfig",
    "AgentEnv",
    "AgentEnvConfig",
    "BaseEnv",
    "BaseEnvConfig",
    "ChatRenderer",
    "Episode",
    "Item",
    "QAEnv",
    "QAItem",
    "SampledBatch",
    "SampledCompletion",
    "ScoredDataGroup",
    "TrainedSequence",
    "build_scored_group",
]
