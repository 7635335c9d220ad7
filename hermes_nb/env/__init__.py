"""The environment author API: subclass ``BaseEnv``, configure with ``BaseEnvConfig``, return ``ScoredDataGroup``."""

from hermes_nb.env.base import BaseEnv
from hermes_nb.env.config import LOCKED_ENV_FIELDS, APIServerConfig, BaseEnvConfig
from hermes_nb.env.qa import QAEnv
from hermes_nb.env.scoring import build_scored_group
from hermes_nb.env.types import Item, QAItem, SampledBatch, SampledCompletion
from hermes_nb.protocol.trajectory import ScoredDataGroup

__all__ = [
    "LOCKED_ENV_FIELDS",
    "APIServerConfig",
    "BaseEnv",
    "BaseEnvConfig",
    "Item",
    "QAEnv",
    "QAItem",
    "SampledBatch",
    "SampledCompletion",
    "ScoredDataGroup",
    "build_scored_group",
]
