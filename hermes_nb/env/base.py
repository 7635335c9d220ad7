"""``BaseEnv``: the contract an environment author implements, shaped like ``atroposlib.envs.base.BaseEnv``.

An environment hands out items (``get_next_item``), turns one item into a scored group of ``group_size``
completions (``collect_trajectories``), and reports held-out accuracy (``evaluate``). The host in
``hermes_nb.env_host.loop`` drives it: ``serve`` (talk to the trajectory API during a run), ``process`` (write
groups to a JSONL without an API, for inspection) and ``evaluate``.

The scoring convention: reward ``1.0`` for a correct completion and ``0.0`` otherwise unless the task has
partial credit. Whether a completion is correct is the environment's verdict, decided once per completion by
``is_correct`` (by default full marks, ``score >= 1.0``) and counted the same everywhere: ``scored_group`` sends
it with the group, where the host counts it for ``env/percent_correct`` (every completion sampled), the
trainer for ``train/percent_correct`` (the trained batch) and ``rl_test_inference`` for its accuracy. A group that
states no verdict, as from an environment written against atroposlib, is judged by its scores
(``hermes_nb.protocol.trajectory.score_is_correct``).
"""

from __future__ import annotations

import inspect
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from hermes_nb.config import BaseEnvConfig, EnvironmentNeeds
from hermes_nb.env.scoring import GroupMember, build_scored_group
from hermes_nb.env.server_config import APIServerConfig
from hermes_nb.env.types import Item
from hermes_nb.protocol.trajectory import ScoredDataGroup, score_is_correct

if TYPE_CHECKING:
    from hermes_nb.env.inference_client import ServerManager


# The command an environment's ``cli()`` hands over to: its host, named as a process runs it, not imported.
HOST_MODULE = "hermes_nb.env_host"


class BaseEnv(ABC):
    """Subclass this, set ``name`` and ``env_config_cls``, implement the abstract methods.

    ``self.server`` samples from the policy being trained (``await self.server.sample(prompt, n=...)`` returns
    ``SampledCompletion`` objects with exact token ids and logprobs); ``self.config`` is the validated config.
    """

    name: ClassVar[str | None] = None
    env_config_cls: ClassVar[type[BaseEnvConfig]] = BaseEnvConfig
    # Trainer settings it needs (a base model, one whose template renders tools): applied when it is selected,
    # checked at start (read by the schema child: hermes_nb.selection.schema_child).
    trainer_needs: ClassVar[EnvironmentNeeds] = EnvironmentNeeds()

    def __init__(
        self,
        config: BaseEnvConfig,
        server_configs: Sequence[APIServerConfig] | None = None,
        slurm: bool = False,
        testing: bool = False,
    ) -> None:
        from hermes_nb.env.inference_client import ServerManager

        self.config = config
        self.server_configs = list(server_configs or [APIServerConfig()])
        # The tokenizer reads an endpoint's text-only answers (a hosted provider's) into token ids.
        self.server: ServerManager = ServerManager(
            self.server_configs, tokenizer_name=getattr(config, "tokenizer_name", None)
        )
        self.testing = testing
        # The completions of groups scored_group dropped (equal scores): never sent, yet sampled, so the host
        # counts them with the groups it was handed (take_dropped) for env/reward_mean and env/percent_correct.
        self.dropped_scores: list[float] = []
        self.dropped_correct: list[bool] = []
        self.curr_step = 0

    @classmethod
    def config_init(cls) -> tuple[BaseEnvConfig, list[APIServerConfig]]:
        """The default config of this environment and the inference servers it talks to."""
        return cls.env_config_cls(), [APIServerConfig()]

    async def setup(self) -> None:  # noqa: B027 - optional hook, empty by design
        """Load or generate data. Called once before the first item."""

    async def teardown(self) -> None:  # noqa: B027 - optional hook, empty by design
        """Release what ``setup`` holds (servers, child processes). Called once when the process ends its work,
        in the task that ran ``setup``, whether or not it succeeded."""

    @abstractmethod
    async def get_next_item(self) -> Item:
        """The next training item (never a held-out evaluation item)."""

    @abstractmethod
    async def collect_trajectories(self, item: Item) -> tuple[ScoredDataGroup | None, list[Item]]:
        """Sample ``group_size`` completions for ``item`` and score them.

        Returns the scored group (or ``None`` to skip it) and a backlog of extra items to process next.
        """

    def is_correct(self, score: float) -> bool:
        """This environment's verdict on a completion with ``score``: full marks (``score >= 1.0``) by default.

        Override it when correct means something else (a full score other than 1.0, or a threshold).
        """
        return score_is_correct(score)

    def scored_group(
        self, completions: Sequence[GroupMember], scores: Sequence[float], correct: Sequence[bool] | None = None
    ) -> ScoredDataGroup | None:
        """The group to return from ``collect_trajectories``, carrying this environment's verdict on each completion.

        ``correct`` defaults to ``is_correct`` of each score. The verdicts are sent with the group, so the host,
        the trainer and ``rl_test_inference`` count the same completions as correct. ``None`` (skip) when
        ``ensure_scores_are_not_same`` and every score is equal; its scores and verdicts are kept for the
        host's ``env/*`` counts (``take_dropped``). A member is a sampled completion, or a multi-turn episode's
        ``TrainedSequence`` (``hermes_nb.env.scoring``).
        """
        correct_G = list(correct) if correct is not None else [self.is_correct(s) for s in scores]
        group = build_scored_group(
            completions, scores, correct=correct_G, ensure_scores_are_not_same=self.config.ensure_scores_are_not_same
        )
        if group is None:
            self.dropped_scores.extend(float(s) for s in scores)
            self.dropped_correct.extend(bool(c) for c in correct_G)
        return group

    def take_dropped(self) -> tuple[list[float], list[bool]]:
        """The scores and verdicts of the groups ``scored_group`` dropped since the last call (then forgotten)."""
        taken = self.dropped_scores, self.dropped_correct
        self.dropped_scores, self.dropped_correct = [], []
        return taken

    async def score(self, rollout_group_data: Any) -> ScoredDataGroup | None:
        """Convention hook: turn sampled rollouts into a ``ScoredDataGroup``. Optional."""
        raise NotImplementedError(f"{type(self).__name__}.score is not implemented")

    async def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """Score held-out items; return metrics such as ``{"eval/percent_correct": 0.42}``."""
        return {}

    async def wandb_log(self, wandb_metrics: dict[str, float] | None = None) -> dict[str, float]:
        """Add this environment's own metrics to ``wandb_metrics``; the host writes them to W&B and JSONL next
        to what it counts itself (``env/reward_mean``, ``env/percent_correct``, the groups' fate)."""
        return dict(wandb_metrics or {})

    @classmethod
    def cli(cls) -> None:
        """Command line for this environment (``python my_env.py serve --config run.yaml``): the ``serve``,
        ``process`` and ``evaluate`` subcommands of ``python -m hermes_nb.env_host``, given this class's file.

        The process becomes that command (``os.execv``, same pid): the environment's host sits above this
        contract, which never imports it; the class is loaded from its file again, as a run loads it."""
        source = inspect.getsourcefile(cls)
        if source is None:
            raise SystemExit(f"{cls.__name__}.cli(): the class has no source file to hand to {HOST_MODULE}")
        argv = sys.argv[1:]
        # The subcommand first, then the environment file it runs: ``serve FILE:CLASS --config ...``.
        handed = [*argv[:1], f"{source}:{cls.__name__}", *argv[1:]] if argv and not argv[0].startswith("-") else argv
        os.execv(sys.executable, [sys.executable, "-m", HOST_MODULE, *handed])
