"""The trainer process: inference server first (``/health`` 503 while loading), model, registration, loop.

Exit codes: 0 after ``total_steps`` or a clean stop (SIGTERM/SIGINT: the current step finishes, a ``stop``
checkpoint is saved, ``stopped`` is logged); 2 for a user error (one line in the log); 1 for a crash (the
traceback goes to stderr, which the supervisor redirects to ``logs/trainer_<run_id>.log``).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from hermes_nb.config import RunConfig
from hermes_nb.errors import HermesNBError
from hermes_nb.trainer.loop import LoopOutcome

if TYPE_CHECKING:
    from hermes_nb.metrics.logger import MetricsLogger

logger = logging.getLogger("hermes_nb.trainer")


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


def run(config: RunConfig, run_dir: Path, stop: threading.Event) -> LoopOutcome:
    """Everything the process does, in order; each step waits on readiness, never on a fixed sleep."""
    import torch

    from hermes_nb.inference.engine import InferenceEngine, Policy
    from hermes_nb.inference.server import InferenceServer
    from hermes_nb.trainer.api_client import TrajectoryApi
    from hermes_nb.trainer.backend import make_backend
    from hermes_nb.trainer.loop import LoopSettings, registration_for, run_training
    from hermes_nb.trainer.types import SamplerHandle

    trainer = config.trainer
    if trainer.torch_threads:
        torch.set_num_threads(trainer.torch_threads)
    torch.manual_seed(trainer.seed)
    engine = InferenceEngine(seed=trainer.seed)
    server = InferenceServer(engine, config.infra.inference_port) if config.infra.inference_port else None
    if server is not None:
        server.start()
        logger.info("inference server listening on 127.0.0.1:%d (loading model)", server.port)
    backend = make_backend(config)

    def publish(handle: SamplerHandle, step: int) -> None:
        engine.publish(Policy(model=handle.policy, tokenizer=backend.tokenizer, version=step, name=backend.model_name))

    publish(backend.save_weights_for_sampler("initial"), 0)
    logger.info("model %s loaded; policy version 0 is served", backend.model_name)
    settings = LoopSettings.from_config(config, run_dir)
    if not config.infra.api_url:
        raise HermesNBError(
            f"infra.api_url: not set in {run_dir / 'config.yaml'}; the trainer needs the trajectory API"
        )
    api = TrajectoryApi(config.infra.api_url)
    metrics = _metrics_logger(config, run_dir)
    try:
        if not api.register(registration_for(settings, config, 0), stop):
            return LoopOutcome("stopped", 0)
        logger.info("registered with the trajectory API at %s", config.infra.api_url)
        return run_training(backend, api, settings, config, stop=stop, metrics=metrics, publish=publish)
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
