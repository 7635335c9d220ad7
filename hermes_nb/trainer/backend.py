"""The Tinker-shaped interface the training loop talks to (its implementations: ``hermes_nb.backends``).

Semantics follow Tinker: ``forward_backward`` accumulates gradients (calling it twice before ``optim_step``
adds them up), ``optim_step`` applies and clears them. ``save_weights_for_sampler`` publishes the current
weights as an immutable snapshot for the inference server, so a generation never sees a half-applied update;
``sampler_model`` gives the in-process inference server its own copy of the model to load them into.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from hermes_nb.config import RunConfig, base_model_dir
from hermes_nb.inference.contract import SamplingEngine
from hermes_nb.protocol.run_files import CONFIG_FILE
from hermes_nb.trainer.types import AdamParams, Datum, ForwardBackwardOutput, LossConfig, OptimStepOutput, SamplerHandle


class TrainingBackend(Protocol):
    @property
    def tokenizer(self) -> Any: ...

    @property
    def model_name(self) -> str: ...

    def forward(self, data: list[Datum]) -> list[list[float]]:
        """Logprob of each target token under the current weights (no gradient), one list per datum."""
        ...

    def reference_forward(self, data: list[Datum]) -> list[list[float]]:
        """Logprob of each target token under the frozen reference policy of the KL penalty (no gradient), one
        list per datum: what ``Datum.reference_logprobs_T`` carries into ``forward_backward``."""
        ...

    def teacher_forward(self, data: list[Datum]) -> list[list[float]]:
        """Logprob of each target token under the distillation's teacher (``trainer.teacher_model``; no gradient),
        one list per datum (``hermes_nb.trainer.step.distillation``)."""
        ...

    def forward_backward(
        self, data: list[Datum], loss_fn: str, loss_fn_config: LossConfig | None = None
    ) -> ForwardBackwardOutput:
        """Add the gradient of the batch's loss (``hermes_nb.trainer.step.losses``); its value and diagnostics."""
        ...

    def optim_step(self, adam: AdamParams) -> OptimStepOutput: ...

    def save_state(self, path: Path, extra: dict[str, Any]) -> str | None:
        """Weights (``from_pretrained``-loadable), tokenizer, and ``trainer_state.pt`` (optimizer + ``extra``).
        A backend whose state lives on a server writes what it needs to find it again into ``path`` and returns
        the state's remote path (``tinker://...``); a local one returns None."""
        ...

    def load_state(self, path: Path) -> dict[str, Any]:
        """Restore weights and optimizer from ``save_state``'s directory; returns its ``extra``."""
        ...

    def save_weights_for_sampler(self, name: str) -> SamplerHandle: ...

    def sampler_model(self) -> Any: ...

    def watch(self, stop: threading.Event) -> None:
        """Watch what the model lives on outside this process (a server) while the trainer waits for batches:
        once it is gone for good, keep the error in ``fault`` and set ``stop``. Returns at once (a backend with
        nothing outside watches nothing)."""
        ...

    @property
    def fault(self) -> Exception | None:
        """What ``watch`` found gone, for the trainer to raise once its loop has stopped; None while all is well."""
        ...


def model_dir_for(base_model: str) -> Path:
    """The model directory of ``trainer.base_model``; refused unless it holds a model (a ``config.json``)."""
    from hermes_nb.errors import ConfigError

    path = base_model_dir(base_model)
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"trainer.base_model: {base_model!r} -> {path} has no config.json; "
            "accepted: 'embedded', 'embedded-chat', a local Hugging Face model directory or a hub id (org/name)"
        )
    return path


def initial_weights(config: RunConfig) -> Path | None:
    """The weights the model starts from, before a resume restores its own: ``infra.init_weights`` (transfer).

    A resumed LoRA run also needs the weights its adapter was trained on, which are those of the run it
    continues (recorded in the checkpoint's ``config.yaml``); a full fine-tune overwrites every weight on resume,
    so it skips that load."""
    infra = config.infra
    if infra.init_weights:
        return Path(infra.init_weights)
    if not infra.resume_checkpoint or config.trainer.lora_rank == 0:
        return None
    saved = Path(infra.resume_checkpoint) / CONFIG_FILE
    earlier = RunConfig.load(saved).infra.init_weights if saved.is_file() else None
    return Path(earlier) if earlier else None


class BackendParts(NamedTuple):
    """What a trainer process trains and serves with for ``trainer.backend``: given by its entry point
    (``hermes_nb.processes.trainer`` hands ``hermes_nb.backends.PARTS``), so this package never imports the
    implementations that build on it. The engine takes what the backend's ``save_weights_for_sampler`` publishes,
    whose type only the backend knows (``SamplerHandle.policy``)."""

    make_backend: Callable[[RunConfig], TrainingBackend]
    make_engine: Callable[[RunConfig], SamplingEngine[Any]]
