"""``BaseEnv``: the contract an environment author implements, shaped like ``atroposlib.envs.base.BaseEnv``.

An environment hands out items (``get_next_item``), turns one item into a scored group of ``group_size``
completions (``collect_trajectories``), and reports held-out accuracy (``evaluate``). The runtime in
``hermes_nb.env.runtime`` drives it: ``serve`` (talk to the trajectory API during a run), ``process`` (write
groups to a JSONL without an API, for inspection) and ``evaluate``.

The scoring convention: reward ``1.0`` for a correct completion and ``0.0`` otherwise unless the task has
partial credit; record correctness in ``self.percent_correct_buffer`` so that ``train/percent_correct`` is logged.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from hermes_nb.env.config import APIServerConfig, BaseEnvConfig
from hermes_nb.env.types import Item
from hermes_nb.protocol.trajectory import ScoredDataGroup

if TYPE_CHECKING:
    from hermes_nb.env.server import ServerManager


class BaseEnv(ABC):
    """Subclass this, set ``name`` and ``env_config_cls``, implement the abstract methods.

    ``self.server`` samples from the policy being trained (``await self.server.sample(prompt, n=...)`` returns
    ``SampledCompletion`` objects with exact token ids and logprobs); ``self.config`` is the validated config.
    """

    name: ClassVar[str | None] = None
    env_config_cls: ClassVar[type[BaseEnvConfig]] = BaseEnvConfig

    def __init__(
        self,
        config: BaseEnvConfig,
        server_configs: Sequence[APIServerConfig] | None = None,
        slurm: bool = False,
        testing: bool = False,
    ) -> None:
        from hermes_nb.env.server import ServerManager

        self.config = config
        self.server_configs = list(server_configs or [APIServerConfig()])
        self.server: ServerManager = ServerManager(self.server_configs)
        self.testing = testing
        self.percent_correct_buffer: list[float] = []
        self.curr_step = 0

    @classmethod
    def config_init(cls) -> tuple[BaseEnvConfig, list[APIServerConfig]]:
        """The default config of this environment and the inference servers it talks to."""
        return cls.env_config_cls(), [APIServerConfig()]

    async def setup(self) -> None:  # noqa: B027 - optional hook, empty by design
        """Load or generate data. Called once before the first item."""

    @abstractmethod
    async def get_next_item(self) -> Item:
        """The next training item (never a held-out evaluation item)."""

    @abstractmethod
    async def collect_trajectories(self, item: Item) -> tuple[ScoredDataGroup | None, list[Item]]:
        """Sample ``group_size`` completions for ``item`` and score them.

        Returns the scored group (or ``None`` to skip it) and a backlog of extra items to process next.
        """

    async def score(self, rollout_group_data: Any) -> ScoredDataGroup | None:
        """Convention hook: turn sampled rollouts into a ``ScoredDataGroup``. Optional."""
        raise NotImplementedError(f"{type(self).__name__}.score is not implemented")

    async def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """Score held-out items; return metrics such as ``{"eval/percent_correct": 0.42}``."""
        return {}

    async def wandb_log(self, wandb_metrics: dict[str, float] | None = None) -> dict[str, float]:
        """Add this environment's metrics to ``wandb_metrics``; the runtime writes them to W&B and JSONL."""
        metrics = dict(wandb_metrics or {})
        if self.percent_correct_buffer:
            buffer = self.percent_correct_buffer
            metrics["train/percent_correct"] = sum(buffer) / len(buffer)
            self.percent_correct_buffer = []
        return metrics

    @classmethod
    def cli(cls) -> None:
        """Command line for this environment: ``serve``, ``process`` and ``evaluate`` subcommands."""
        from hermes_nb.env.cli import main_for_class

        raise SystemExit(main_for_class(cls))
