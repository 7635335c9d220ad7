"""The training backends and inference engines a run can use, picked by ``trainer.backend``.

The one place that knows every implementation: the local backend and batched engine (torch on this machine) and
the Tinker ones (``hermes_nb.tinker``). The trainer's loop and its inference server speak only their protocols
(``hermes_nb.trainer.backend.TrainingBackend``, ``hermes_nb.inference.contract.SamplingEngine``), and the trainer
process's entry point (``hermes_nb.processes.trainer``) hands ``PARTS`` to it. Implementations are imported when
chosen, so a local run never imports the Tinker SDK.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hermes_nb.config import RunConfig
from hermes_nb.inference.contract import SamplingEngine
from hermes_nb.trainer.backend import BackendParts, TrainingBackend, initial_weights, model_dir_for


def make_backend(config: RunConfig) -> TrainingBackend:
    """The backend named by ``trainer.backend``: the architecture of ``trainer.base_model``, with the weights of
    ``initial_weights(config)`` when set (weights only: the optimizer starts fresh), and the KL penalty's reference
    ``infra.reference_weights`` (``hermes_nb.runs.transfer.resolve``)."""
    trainer = config.trainer
    if trainer.backend == "tinker":
        from hermes_nb.tinker.backend import TinkerBackend

        return TinkerBackend(config)
    from hermes_nb.trainer.local.local_backend import LocalBackend

    return LocalBackend(
        model_dir_for(trainer.base_model),
        lora_rank=trainer.lora_rank,
        seed=trainer.seed,
        init_weights=initial_weights(config),
        device=trainer.device,
        dtype=trainer.dtype,
        gradient_checkpointing=trainer.gradient_checkpointing,
        reference_weights=Path(config.infra.reference_weights) if config.infra.reference_weights else None,
        teacher_weights=Path(config.infra.teacher_weights) if config.infra.teacher_weights else None,
    )


def make_engine(config: RunConfig) -> SamplingEngine[Any]:
    """The sampling engine that serves the run's policy for ``trainer.backend``: batched local sampling
    (``InferenceEngine``, or ``VLLMEngine`` for ``infra.sampler: vllm``), or forwarding to Tinker's sampler
    (``TinkerEngine``). Its weights are what ``make_backend``'s backend publishes for the sampler."""
    if config.trainer.backend == "tinker":
        from hermes_nb.tinker.engine import TinkerEngine

        return TinkerEngine()
    trainer = config.trainer
    if config.infra.sampler == "vllm":
        # Chosen at start (hermes_nb.runs.sampler_choice), which also put this process under the vLLM Python.
        from hermes_nb.inference.vllm_engine import VLLMEngine

        model_dir = model_dir_for(trainer.base_model)
        return VLLMEngine(
            model_dir,
            gpu_memory_utilization=trainer.vllm_gpu_memory_utilization,
            sleep_mode=trainer.vllm_sleep_mode,
            device=trainer.device,
            dtype=trainer.dtype,
            seed=trainer.seed,
        )
    from hermes_nb.inference.engine import InferenceEngine

    # Sampling in a forked child keeps it off the training thread's GIL (CPU models; elsewhere the engine's thread).
    return InferenceEngine(seed=trainer.seed, sampler_process=True)


PARTS = BackendParts(make_backend=make_backend, make_engine=make_engine)
