"""What the trainer process does (``run``): inference server first (``/health`` 503 while loading), model,
registration, loop. Its entry point, arguments, signals and exit codes: ``hermes_nb.processes.trainer``.

Starting point: ``infra.resume_checkpoint`` (weights, optimizer and RNG; steps continue after
``infra.start_step``), else ``infra.init_weights`` (weights only), else the base model. With
``trainer.transfer_learning`` the batches mix in ``infra.replay_trajectories`` (``hermes_nb.trainer.batches.replay``);
with ``trainer.dynamic_sampling`` they are filled with groups that carry signal
(``hermes_nb.trainer.batches.dynamic_sampling``).

After the final step the process keeps serving the policy while an environment is still registered, for at most
``FINAL_EVAL_GRACE`` seconds: the environment's final evaluation samples from this server.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes_nb.config import RunConfig
from hermes_nb.errors import HermesNBError, TransferError
from hermes_nb.protocol.auth import api_secret_from_env
from hermes_nb.trainer.run.loop import LoopOutcome

if TYPE_CHECKING:
    from hermes_nb.inference.contract import SamplingEngine
    from hermes_nb.metrics.logger import MetricsLogger
    from hermes_nb.trainer.backend import BackendParts, TrainingBackend
    from hermes_nb.trajectory_api.client import SyncTrajectoryClient

logger = logging.getLogger("hermes_nb.trainer")

# The environment runs its final evaluation once the API's step reaches total_steps, which is when this trainer
# takes its last batch, and it samples from this process's inference server. Two minutes covers the shipped
# environments' evaluations on CPU many times over; the bound keeps an environment that died without
# disconnecting from holding a finished run open.
FINAL_EVAL_GRACE = 120.0
# How often /health is asked while waiting; the wait ends within this after the environment disconnects.
ENV_POLL_S = 0.2
# A local /health answers in milliseconds; one that takes seconds means the API is going away.
HEALTH_TIMEOUT_S = 5.0


def _metrics_logger(config: RunConfig, run_dir: Path) -> MetricsLogger:
    from hermes_nb.health import HealthWatch
    from hermes_nb.metrics.logger import MetricsLogger, WandbRunSettings, resolve_wandb_mode
    from hermes_nb.protocol.run_files import HEALTH_FILE, TRAINER_METRICS_FILE

    wandb = WandbRunSettings(
        project=config.wandb.project,
        name=config.wandb.run_name,
        group=config.wandb.run_name,
        mode=resolve_wandb_mode(config.wandb.mode),
        dir=run_dir,
        entity=config.wandb.entity,
        config=config.model_dump(mode="json"),
        role="trainer",
    )
    health = HealthWatch(run_dir / HEALTH_FILE, "trainer")
    return MetricsLogger(run_dir / TRAINER_METRICS_FILE, wandb=wandb, health=health)


def restore(backend: TrainingBackend, config: RunConfig) -> int:
    """Load ``infra.resume_checkpoint`` into ``backend`` when set; returns the step training continues after."""
    from hermes_nb.trainer.run.checkpoints import load_checkpoint

    infra = config.infra
    if not infra.resume_checkpoint:
        return 0
    step = load_checkpoint(backend, Path(infra.resume_checkpoint))
    if step != infra.start_step:
        raise TransferError(
            f"infra.start_step: {infra.start_step} but {infra.resume_checkpoint} was saved at step {step}; "
            "start the resumed run again from its run id"
        )
    logger.info("resumed from %s at step %d (weights, optimizer and RNG state)", infra.resume_checkpoint, step)
    return step


def raise_fault(backend: TrainingBackend) -> None:
    """A server the backend's model lives on went away while the loop waited (``TrainingBackend.watch``)."""
    if backend.fault is not None:
        raise backend.fault


def wait_for_final_evaluation(
    api: SyncTrajectoryClient, stop: threading.Event, grace: float = FINAL_EVAL_GRACE
) -> None:
    """Return once no environment is registered, the API cannot tell, ``stop`` is set, or ``grace`` runs out."""
    deadline = time.monotonic() + grace
    while not stop.is_set():
        health = api.health_or_none(timeout=HEALTH_TIMEOUT_S)
        if health is None or not health.num_envs:
            return
        if time.monotonic() >= deadline:
            logger.warning("environment still registered %.0f s after the final step; exiting anyway", grace)
            return
        stop.wait(ENV_POLL_S)


def default_torch_threads() -> int:
    """Half the cores: this process runs two torch workloads at once, the optimizer step and the inference
    server's batched sampling, each in its own thread. Letting each use every core oversubscribes them; on two
    cores a training step measured 3x slower with 2 intra-op threads than with 1 while sampling ran beside it."""
    return max(1, (os.cpu_count() or 2) // 2)


def serve_inference(engine: SamplingEngine[Any], port: int | None, cleanup: contextlib.ExitStack) -> None:
    """Serve ``engine`` on ``port`` (no port: no server) until ``cleanup`` closes, which also closes the engine."""
    from hermes_nb.inference.server import InferenceServer

    cleanup.callback(engine.close)
    if not port:
        return
    server = InferenceServer(engine, port)
    # Registered before starting: a server that failed to bind, or is still binding, is stopped all the same.
    cleanup.callback(server.stop)
    server.start()
    logger.info("inference server listening on 127.0.0.1:%d (loading model)", server.port)


def log_hardware(config: RunConfig) -> None:
    """Resolve ``trainer.device`` / ``trainer.dtype`` first, so a CUDA device this machine lacks is one line in
    the log and exit 2 before any server starts, and the log says where the model runs."""
    trainer = config.trainer
    if trainer.backend != "local":
        return
    from hermes_nb.system.devices import resolve_hardware

    hardware = resolve_hardware(trainer.device, trainer.dtype)
    checkpointing = "on" if trainer.gradient_checkpointing else "off"
    logger.info("local backend on %s (gradient checkpointing %s)", hardware.describe(), checkpointing)


def run(config: RunConfig, run_dir: Path, stop: threading.Event, parts: BackendParts) -> LoopOutcome:
    """Everything the process does, in order; each step waits on readiness, never on a fixed sleep.

    Whatever fails after the inference server starts (the model load, the config, the registration), the server,
    the engine, the API client and the metrics logger are closed on the way out."""
    import torch

    from hermes_nb.inference.contract import Policy
    from hermes_nb.trainer.batches.dynamic_sampling import with_dynamic_sampling
    from hermes_nb.trainer.batches.replay import with_replay
    from hermes_nb.trainer.run.loop import LoopSettings, run_training
    from hermes_nb.trainer.run.registration import registration_for
    from hermes_nb.trainer.types import SamplerHandle
    from hermes_nb.trajectory_api.client import SyncTrajectoryClient

    trainer = config.trainer
    torch.set_num_threads(trainer.torch_threads or default_torch_threads())
    torch.manual_seed(trainer.seed)
    log_hardware(config)
    with contextlib.ExitStack() as cleanup:
        engine = parts.make_engine(config)
        serve_inference(engine, config.infra.inference_port, cleanup)
        backend = parts.make_backend(config)

        def publish(handle: SamplerHandle, step: int) -> None:
            engine.publish_weights(handle.policy, step)

        backend.watch(stop)
        start_step = restore(backend, config)
        sampler = backend.sampler_model()
        engine.publish(Policy(model=sampler, tokenizer=backend.tokenizer, version=start_step, name=backend.model_name))
        logger.info("model %s loaded; policy version %d is served", backend.model_name, start_step)
        settings = LoopSettings.from_config(config, run_dir)
        if not config.infra.api_url:
            raise HermesNBError(
                f"infra.api_url: not set in {run_dir / 'config.yaml'}; the trainer needs the trajectory API"
            )
        api = cleanup.enter_context(
            contextlib.closing(SyncTrajectoryClient(config.infra.api_url, secret=api_secret_from_env()))
        )
        metrics = cleanup.enter_context(contextlib.closing(_metrics_logger(config, run_dir)))
        source = with_dynamic_sampling(with_replay(api, config, start_step), settings, start_step)
        if api.register_when_up(registration_for(settings, config, start_step), stop) is None:
            raise_fault(backend)
            return LoopOutcome("stopped", start_step)
        logger.info("registered with the trajectory API at %s", config.infra.api_url)
        outcome = run_training(
            backend,
            source,
            settings,
            config,
            stop=stop,
            metrics=metrics,
            publish=publish,
            start_step=start_step,
            pause_sampling=engine.sleep if config.trainer.vllm_sleep_mode else None,
        )
        raise_fault(backend)
        if outcome.reason == "completed":
            logger.info("final checkpoint saved; serving the policy while the environment evaluates")
            wait_for_final_evaluation(api, stop)
        return outcome
