"""Registering with the trajectory API, and where the run stands as this environment sees it.

The trainer's numbers win over the environment config's: they describe the run actually going on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from hermes_nb.config import BaseEnvConfig
from hermes_nb.env.base import BaseEnv
from hermes_nb.env_host.trajectory_link import TrajectoryLink
from hermes_nb.protocol.trajectory import RegisterEnv, RegisterEnvResponse

logger = logging.getLogger(__name__)


@dataclass
class RunProgress:
    """The trainer's step and the run's shape (from the registration), and the API's queue (from each poll)."""

    step: int
    total_steps: int
    batch_size: int
    max_token_len: int
    vocab_size: int | None = None  # the trained model's, when the trainer registered it
    queue_groups: int = 0
    queue_room: int | None = None  # sequences the API takes before its cap; None: no cap

    @classmethod
    def from_config(cls, config: BaseEnvConfig) -> RunProgress:
        """The environment config's numbers, until the registration replaces them."""
        return cls(
            step=0, total_steps=config.total_steps, batch_size=config.batch_size,
            max_token_len=config.max_token_length,
        )  # fmt: skip


def registration_for(env: BaseEnv) -> RegisterEnv:
    config = env.config
    return RegisterEnv(
        max_token_length=config.max_token_length,
        desired_name=config.wandb_name or env.name or type(env).__name__,
        weight=config.inference_weight,
        group_size=config.group_size,
    )


async def take_registration(
    progress: RunProgress, registration: RegisterEnvResponse, link: TrajectoryLink, config: BaseEnvConfig
) -> None:
    """Fill ``progress`` from the trainer's registration and the API's ``/info``."""
    if registration.num_steps and registration.num_steps > 0:
        progress.total_steps = registration.num_steps
    progress.step = registration.starting_step or 0
    info = await link.info()
    if info.batch_size > 0:
        progress.batch_size = info.batch_size
    if info.max_token_len > 0:
        progress.max_token_len = info.max_token_len
    progress.vocab_size = info.vocab_size
    logger.info(
        "registered as env %s: step %d of %d, batch %d sequences, groups of %d, up to %d workers",
        link.env_id, progress.step, progress.total_steps, progress.batch_size, config.group_size,
        config.max_num_workers,
    )  # fmt: skip
