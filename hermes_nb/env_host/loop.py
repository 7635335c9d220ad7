"""Driving a ``BaseEnv``: ``serve`` (feed a training run), ``process`` (groups to a JSONL) and ``evaluate_once``.

``serve`` follows ``atroposlib``'s environment manager: register with the trajectory API (waiting for the
trainer), then poll ``/status-env`` and keep up to ``max_num_workers`` groups in flight, each worker running
``get_next_item`` -> ``collect_trajectories`` -> ``POST /scored_data`` (backlog items first). It stops adding
workers while the API's queue already holds ``max_batches_offpolicy`` batches (back-pressure, so the policy that
sampled a group is never far behind the one trained on it), evaluates before training, every
``steps_per_eval`` trainer steps and at the end, and exits when the trainer's step reaches ``total_steps``.
``ServeLoop`` is that loop; its parts each do one job: ``registration`` (the trainer's numbers), ``workers``
(groups in flight, back-pressure, faults), ``evaluation`` (the schedule) and ``step_metrics`` (the rows).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel

from hermes_nb.config import RunConfig
from hermes_nb.env.base import BaseEnv
from hermes_nb.env.inference_client import InferenceError
from hermes_nb.env_host import faults
from hermes_nb.env_host.evaluation import EvalSchedule
from hermes_nb.env_host.process_command import ProcessSummary, process
from hermes_nb.env_host.registration import RunProgress, registration_for, take_registration
from hermes_nb.env_host.step_metrics import StepMetrics
from hermes_nb.env_host.trajectory_link import TrajectoryAPIError, TrajectoryLink
from hermes_nb.env_host.workers import Workers
from hermes_nb.health import HealthWatch
from hermes_nb.metrics.logger import MetricsLogger, WandbRunSettings, resolve_wandb_mode
from hermes_nb.protocol.run_files import ENV_METRICS_FILE, HEALTH_FILE
from hermes_nb.protocol.trajectory import RegisterEnvResponse

logger = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["ProcessSummary", "ServeOutcome", "evaluate_once", "process", "serve"]

# How often the serve loop polls /status-env when nothing else happens, as atroposlib does. A finished worker wakes
# it at once (a fixed 0.25 s poll left the sampler idle between waves: the quickstart's steps take ~0.1 s), so
# the poll only matters for noticing that the trainer made room in a full queue.
POLL_S = 0.1


class ServeOutcome(BaseModel):
    """How ``serve`` ended: ``completed`` (trainer reached total_steps), ``stopped`` (signal) or ``failed``."""

    status: Literal["completed", "stopped", "failed"]
    step: int
    groups_posted: int = 0
    error: str | None = None

    @property
    def exit_code(self) -> int:
        return 1 if self.status == "failed" else 0


async def evaluate_once(env: BaseEnv) -> dict[str, float]:
    """Set the environment up and run its evaluation once against its inference server."""
    await env.setup()
    return await env.evaluate()


async def serve(
    env: BaseEnv, run_config: RunConfig, *, stop: asyncio.Event | None = None, handle_signals: bool = True
) -> ServeOutcome:
    """Feed the run's trainer until it reaches ``total_steps``, ``stop`` is set, or SIGTERM/SIGINT arrives.

    ``handle_signals``: this process is the environment's own (the CLI's ``serve``), so SIGTERM/SIGINT stop it,
    and an event loop blocked past ``env.worker_timeout`` ends it with exit code 1 (``faults.LoopWatchdog``).
    A failure's cause is the last thing logged, where the run's status shows the log's tail.
    """
    stop = stop or asyncio.Event()
    link = TrajectoryLink(env.config.rollout_server_url)
    metrics = env_metrics_logger(env, run_config)
    serve_loop: ServeLoop | None = None
    try:
        with _stop_on_signals(stop, enabled=handle_signals):
            await env.setup()
            registration = await link.register(registration_for(env), stop=stop)
            if registration is None:
                return ServeOutcome(status="stopped", step=0)
            serve_loop = ServeLoop(env, link, metrics, stop)
            await serve_loop.configure(registration)
            outcome = await serve_loop.run(watchdog=handle_signals)
    except (TrajectoryAPIError, InferenceError) as exc:
        outcome = ServeOutcome(status="failed", step=serve_loop.step if serve_loop else 0, error=str(exc))
    finally:
        if serve_loop is not None:
            await serve_loop.shutdown()
        await link.disconnect()
        await link.aclose()
        if metrics is not None:
            metrics.close()
        await env.teardown()
        await env.server.aclose()
    if outcome.status == "failed":
        logger.error("environment failed: %s", outcome.error)
    return outcome


def env_metrics_logger(env: BaseEnv, run_config: RunConfig) -> MetricsLogger | None:
    """``env_metrics.jsonl`` in the run directory, mirrored to the run's W&B project as ``<run>-env``."""
    run_dir = run_config.infra.run_dir
    if not run_dir:
        return None
    from hermes_nb.metrics.wandb_names import env_wandb_run_name, wandb_run_name

    trainer_name = wandb_run_name(run_config, run_config.infra.run_id or "local")
    mode = resolve_wandb_mode(run_config.wandb.mode) if env.config.use_wandb else "disabled"
    settings = WandbRunSettings(
        project=run_config.wandb.project,
        name=env_wandb_run_name(trainer_name),
        group=trainer_name,
        mode=mode,
        dir=Path(run_dir),
        entity=run_config.wandb.entity,
        config={"env": env.config.model_dump(mode="json")},
        role="env",
    )
    health = HealthWatch(Path(run_dir) / HEALTH_FILE, "env")
    return MetricsLogger(Path(run_dir) / ENV_METRICS_FILE, wandb=settings, health=health)


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event, *, enabled: bool) -> Iterator[None]:
    """SIGTERM (the supervisor's stop) and SIGINT set ``stop`` so the loop disconnects cleanly and exits 0."""
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT) if enabled else ():
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread, or a platform without loop signal handlers
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


class ServeLoop:
    """The environment process's heart during a run: it polls ``/status-env``, follows the trainer's step, keeps
    the workers filled (``workers.py``), evaluates on schedule (``evaluation.py``) and decides how ``serve`` ends."""

    def __init__(self, env: BaseEnv, link: TrajectoryLink, metrics: MetricsLogger | None, stop: asyncio.Event):
        self.env = env
        self.config = env.config
        self.link = link
        self.stop = stop
        self.progress = RunProgress.from_config(env.config)
        self.metrics = StepMetrics(env, metrics)
        self.workers = Workers(env, link, self.progress, self.metrics, stop)
        self.evals = EvalSchedule(env, self.metrics, stop)
        self.loop_itself: asyncio.AbstractEventLoop | None = None  # set when a watchdog guards it

    @property
    def step(self) -> int:
        return self.progress.step

    async def configure(self, registration: RegisterEnvResponse) -> None:
        """Take the trainer's numbers; evaluations count ``steps_per_eval`` from the step it starts at."""
        await take_registration(self.progress, registration, self.link, self.config)
        self.env.curr_step = self.evals.last_step = self.progress.step

    async def run(self, *, watchdog: bool = False) -> ServeOutcome:
        """The serve loop; with ``watchdog``, a blocked event loop ends the process (see ``faults``)."""
        timeout = self.config.worker_timeout
        if not watchdog or timeout <= 0:
            return await self.loop()
        self.loop_itself = asyncio.get_running_loop()
        guard = faults.LoopWatchdog(timeout + faults.WATCHDOG_GRACE_S, self.on_blocked)
        guard.start()
        try:
            return await self.loop()
        finally:
            await guard.stop()

    def on_blocked(self, summary: str, stack: str) -> None:
        """From the watchdog's thread, while the loop's thread is stuck: count it as a timeout, then exit."""
        stuck = asyncio.current_task(self.loop_itself)  # the task running on the stuck loop, read from here
        item = self.workers.tasks.get(stuck) if stuck is not None else None
        if item is not None:
            summary += f" (item {faults.short_repr(item)})"
        self.metrics.stats.record_timeout()
        self.metrics.write_faults_now(self.step)
        faults.exit_process(summary, stack)

    async def loop(self) -> ServeOutcome:
        if self.step < self.progress.total_steps:
            self.evals.start_initial(self.step)
        while not self.stop.is_set():
            status = await self.unless_stopped(self.link.status())
            if status is None:
                break
            self.progress.queue_groups, self.progress.queue_room = status.queue_size, status.queue_room
            await self.observe_step(status.current_step)
            if status.current_step >= self.progress.total_steps:
                return await self.finish()
            if (error := self.workers.reap()) is not None:
                return self.outcome("failed", error)
            self.evals.maybe_start(self.step)
            if not self.evals.running:
                await self.workers.fill()
            await self.idle(POLL_S)
        logger.info("stop requested at step %d; disconnecting", self.step)
        return self.outcome("stopped")

    async def unless_stopped(self, request: Awaitable[T]) -> T | None:
        """The request's answer, or None once ``stop`` is set first: a request retried against an API that went
        away (``TrajectoryLink`` retries for half a minute) must not hold up a stop the supervisor waits for."""
        answer, stopper = asyncio.ensure_future(request), asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({answer, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not answer.done():
                answer.cancel()
            await asyncio.gather(answer, stopper, return_exceptions=True)
        return answer.result() if not answer.cancelled() else None

    async def idle(self, seconds: float) -> None:
        """Until a worker finishes, ``stop`` is set, or ``seconds`` pass."""
        waits = {asyncio.ensure_future(self.stop.wait()), asyncio.ensure_future(self.workers.done.wait())}
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
            self.workers.done.clear()

    async def observe_step(self, current_step: int) -> None:
        """On each new trainer step, log what was collected since the last one (at the new step, as atroposlib)."""
        if current_step == self.step:
            return
        self.progress.step = self.env.curr_step = current_step
        await self.metrics.log_train_row(self.step, self.progress.queue_groups)

    async def finish(self) -> ServeOutcome:
        logger.info("trainer reached step %d of %d; final evaluation", self.step, self.progress.total_steps)
        await self.workers.cancel()
        await self.evals.at_end(self.step)
        return self.outcome("completed" if not self.stop.is_set() else "stopped")

    def outcome(self, status: Literal["completed", "stopped", "failed"], error: str | None = None) -> ServeOutcome:
        return ServeOutcome(status=status, step=self.step, groups_posted=self.workers.groups_posted, error=error)

    async def shutdown(self) -> None:
        await self.workers.cancel()
        await self.evals.cancel()
        await self.metrics.log_train_row(self.step, self.progress.queue_groups)
