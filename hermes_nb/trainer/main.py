"""The trainer process: inference server first (``/health`` 503 while loading), model, registration, loop.

Starting point: ``infra.resume_checkpoint`` (weights, optimizer and RNG; steps continue after
``infra.start_step``), else ``infra.init_weights`` (weights only), else the base model. With
``trainer.transfer_learning`` the batches mix in ``infra.replay_trajectories`` (``hermes_nb.trainer.replay``).

After the final step the process keeps serving the policy while an environment is still registered, for at most
``FINAL_EVAL_GRACE`` seconds: the environment's final evaluation samples from this server.

Exit codes: 0 after ``total_steps`` or a clean stop (SIGTERM/SIGINT: the current step finishes, a ``stop``
checkpoint is saved, ``stopped`` is logged); 2 for a user error (one line in the log); 1 for a crash (the
traceback goes to stderr, which the supervisor redirects to ``logs/trainer_<run_id>.log``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from hermes_nb.config import RunConfig
from hermes_nb.errors import HermesNBError, TransferError
from hermes_nb.trainer.loop import LoopOutcome

if TYPE_CHECKING:
    from hermes_nb.metrics.logger import MetricsLogger
    from hermes_nb.trainer.api_client import TrajectoryApi
    from hermes_nb.trainer.backend import TrainingBackend

logger = logging.getLogger("hermes_nb.trainer")

# The environment runs its final evaluation once the API's step reaches total_steps, which is when this trainer
# takes its last batch, and it samples from this process's inference server. Two minutes covers the shipped
# environments' evaluations on CPU many times over; the bound keeps an environment that died without
# disconnecting from holding a finished run open.
FINAL_EVAL_GRACE = 120.0
# How often /health is asked while waiting; the wait ends within this after the environment disconnects.
ENV_POLL_S = 0.2


def _run_dir(config: RunConfig, config_path: Path) -> Path:
    return Path(config.infra.run_dir) if config.infra.run_dir else config_path.parent


def _metrics_logger(config: RunConfig, run_dir: Path) -> MetricsLogger:
    from hermes_nb.metrics.logger import MetricsLogger, WandbRunSettings, resolve_wandb_mode
    from hermes_nb.protocol.metrics import TRAINER_METRICS_FILE

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
    return MetricsLogger(run_dir / TRAINER_METRICS_FILE, wandb=wandb)


def restore(backend: TrainingBackend, config: RunConfig) -> int:
    """Load ``infra.resume_checkpoint`` into ``backend`` when set; returns the step training continues after."""
    from hermes_nb.trainer.checkpoints import load_checkpoint

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


def wait_for_final_evaluation(api: TrajectoryApi, stop: threading.Event, grace: float = FINAL_EVAL_GRACE) -> None:
    """Return once no environment is registered, the API cannot tell, ``stop`` is set, or ``grace`` runs out."""
    deadline = time.monotonic() + grace
    while not stop.is_set():
        envs = api.connected_envs()
        if not envs:
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


def run(config: RunConfig, run_dir: Path, stop: threading.Event) -> LoopOutcome:
    """Everything the process does, in order; each step waits on readiness, never on a fixed sleep."""
    import torch

    from hermes_nb.inference.engine import InferenceEngine, Policy
    from hermes_nb.inference.server import InferenceServer
    from hermes_nb.trainer.api_client import TrajectoryApi
    from hermes_nb.trainer.backend import make_backend
    from hermes_nb.trainer.loop import LoopSettings, registration_for, run_training
    from hermes_nb.trainer.replay import with_replay
    from hermes_nb.trainer.types import SamplerHandle

    trainer = config.trainer
    torch.set_num_threads(trainer.torch_threads or default_torch_threads())
    torch.manual_seed(trainer.seed)
    engine = InferenceEngine(seed=trainer.seed)
    server = InferenceServer(engine, config.infra.inference_port) if config.infra.inference_port else None
    if server is not None:
        server.start()
        logger.info("inference server listening on 127.0.0.1:%d (loading model)", server.port)
    backend = make_backend(config)

    def publish(handle: SamplerHandle, step: int) -> None:
        engine.publish_weights(handle.policy, step)

    start_step = restore(backend, config)
    sampler = backend.sampler_model()
    engine.publish(Policy(model=sampler, tokenizer=backend.tokenizer, version=start_step, name=backend.model_name))
    logger.info("model %s loaded; policy version %d is served", backend.model_name, start_step)
    settings = LoopSettings.from_config(config, run_dir)
    if not config.infra.api_url:
        raise HermesNBError(
            f"infra.api_url: not set in {run_dir / 'config.yaml'}; the trainer needs the trajectory API"
        )
    api = TrajectoryApi(config.infra.api_url)
    metrics = _metrics_logger(config, run_dir)
    try:
        source = with_replay(api, config, start_step)
        if not api.register(registration_for(settings, config, start_step), stop):
            return LoopOutcome("stopped", start_step)
        logger.info("registered with the trajectory API at %s", config.infra.api_url)
        outcome = run_training(
            backend, source, settings, config, stop=stop, metrics=metrics, publish=publish, start_step=start_step
        )
        if outcome.reason == "completed":
            logger.info("final checkpoint saved; serving the policy while the environment evaluates")
            wait_for_final_evaluation(api, stop)
        return outcome
    finally:
        metrics.close()
        api.close()
        if server is not None:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hermes_nb.trainer", description=__doc__)
    parser.add_argument("--config", required=True, type=Path, help="the run's config.yaml")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per /batch poll would bury the training log.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        logger.info("received %s: finishing the current step, then saving a checkpoint", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        config = RunConfig.load(args.config)
        outcome = run(config, _run_dir(config, args.config), stop)
    except HermesNBError as exc:
        logger.error("%s", exc)
        return 2
    except Exception:
        logger.exception("trainer crashed")
        return 1
    logger.info("trainer %s at step %d", outcome.reason, outcome.last_step)
    return 0
