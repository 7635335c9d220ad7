"""Driving a ``BaseEnv``: ``serve`` (feed a training run), ``process`` (groups to a JSONL) and ``evaluate_once``.

``serve`` follows ``atroposlib``'s environment manager: register with the trajectory API (waiting for the
trainer), then poll ``/status-env`` and keep up to ``max_num_workers`` groups in flight, each worker running
``get_next_item`` -> ``collect_trajectories`` -> ``POST /scored_data`` (backlog items first). It stops adding
workers while the API's queue already holds ``max_batches_offpolicy`` batches (back-pressure, so the policy that
sampled a group is never far behind the one trained on it), evaluates before training, every
``steps_per_eval`` trainer steps and at the end, and exits when the trainer's step reaches ``total_steps``.
A worker's fault (it raised, its group is malformed, it timed out) skips that group; ``hermes_nb.env_host.faults``
says how each is counted and when the run is ended for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from hermes_nb.config import RunConfig
from hermes_nb.env.base import BaseEnv
from hermes_nb.env.inference_client import InferenceError
from hermes_nb.env.types import Item
from hermes_nb.env_host import faults
from hermes_nb.env_host.process_command import ProcessSummary, process
from hermes_nb.env_host.stats import GroupStats
from hermes_nb.env_host.trajectory_link import TrajectoryAPIError, TrajectoryLink
from hermes_nb.errors import EnvironmentGone
from hermes_nb.metrics.logger import MetricsLogger, WandbRunSettings, resolve_wandb_mode
from hermes_nb.protocol.metrics import ENV_QUEUE_SIZE, EVAL_SECONDS
from hermes_nb.protocol.run_files import ENV_METRICS_FILE
from hermes_nb.protocol.trajectory import RegisterEnv, RegisterEnvResponse, ScoredDataGroup, scores_carry_signal

logger = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["ProcessSummary", "ServeOutcome", "evaluate_once", "process", "serve"]

# How often the manager polls /status-env when nothing else happens, as atroposlib does. A finished worker wakes
# it at once (a fixed 0.25 s poll left the sampler idle between waves: the quickstart's steps take ~0.1 s), so
# the poll only matters for noticing that the trainer made room in a full queue.
POLL_S = 0.1
# Fault rows (env/failed_groups, env/timeouts) go out at once, but no more often than this.
FAULT_ROW_S = 1.0


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
    manager: _Manager | None = None
    try:
        with _stop_on_signals(stop, enabled=handle_signals):
            await env.setup()
            registration = await link.register(registration_for(env), stop=stop)
            if registration is None:
                return ServeOutcome(status="stopped", step=0)
            manager = _Manager(env, link, metrics, stop)
            await manager.configure(registration)
            outcome = await manager.run(watchdog=handle_signals)
    except (TrajectoryAPIError, InferenceError) as exc:
        outcome = ServeOutcome(status="failed", step=manager.step if manager else 0, error=str(exc))
    finally:
        if manager is not None:
            await manager.shutdown()
        await link.disconnect()
        await link.aclose()
        if metrics is not None:
            metrics.close()
        await env.teardown()
        await env.server.aclose()
    if outcome.status == "failed":
        logger.error("environment failed: %s", outcome.error)
    return outcome


def registration_for(env: BaseEnv) -> RegisterEnv:
    config = env.config
    return RegisterEnv(
        max_token_length=config.max_token_length,
        desired_name=config.wandb_name or env.name or type(env).__name__,
        weight=config.inference_weight,
        group_size=config.group_size,
    )


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
    return MetricsLogger(Path(run_dir) / ENV_METRICS_FILE, wandb=settings)


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


class _Manager:
    """The serve loop's state: workers in flight, backlog, counters, evaluation schedule."""

    def __init__(self, env: BaseEnv, link: TrajectoryLink, metrics: MetricsLogger | None, stop: asyncio.Event):
        self.env = env
        self.config = env.config
        self.link = link
        self.metrics = metrics
        self.stop = stop
        self.backlog: list[Item] = []
        self.workers: dict[asyncio.Task[None], Item] = {}  # each worker's item, to log with its fault
        self.worker_done = asyncio.Event()  # set by each finishing worker: refill at once, not at the next poll
        self.stats = GroupStats()
        self.groups_posted = 0
        self.consecutive_failures = 0
        self.last_error = ""
        self.step = 0
        self.total_steps = self.config.total_steps
        self.batch_size = self.config.batch_size
        self.max_token_len = self.config.max_token_length
        self.vocab_size: int | None = None  # the trained model's, when the trainer registered it
        self.last_fault_row = 0.0
        self.loop_itself: asyncio.AbstractEventLoop | None = None  # set when a watchdog guards it
        self.eval_task: asyncio.Task[None] | None = None
        self.initial_eval_task: asyncio.Task[None] | None = None
        self.last_eval_step = 0
        self.queue_groups = 0
        self.queue_room: int | None = None  # sequences the API takes before its cap; None: no cap

    async def configure(self, registration: RegisterEnvResponse) -> None:
        """The trainer's numbers win over the environment config's: they describe the run actually going on."""
        if registration.num_steps and registration.num_steps > 0:
            self.total_steps = registration.num_steps
        self.step = self.last_eval_step = registration.starting_step or 0
        self.env.curr_step = self.step
        info = await self.link.info()
        if info.batch_size > 0:
            self.batch_size = info.batch_size
        if info.max_token_len > 0:
            self.max_token_len = info.max_token_len
        self.vocab_size = info.vocab_size
        logger.info(
            "registered as env %s: step %d of %d, batch %d sequences, groups of %d, up to %d workers",
            self.link.env_id, self.step, self.total_steps, self.batch_size, self.config.group_size,
            self.config.max_num_workers,
        )  # fmt: skip

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
        item = self.workers.get(stuck) if stuck is not None else None
        if item is not None:
            summary += f" (item {faults.short_repr(item)})"
        self.stats.record_timeout()
        if self.metrics is not None:
            self.metrics.log(self.step, self.stats.take_faults())
        faults.exit_process(summary, stack)

    async def loop(self) -> ServeOutcome:
        if self.step < self.total_steps:
            # Unlike later evaluations, the first one does not hold the workers back: the policy cannot change
            # before the trainer has a first batch, which only these workers can produce, so it measures the
            # starting policy either way (the trainer's first step after it ends is the exception) while the
            # first step comes sooner. Its requests share the inference server's batches with the workers'.
            logger.info("evaluating before training (step %d), alongside the first groups", self.step)
            self.initial_eval_task = asyncio.create_task(self.evaluate_and_log(self.step))
        while not self.stop.is_set():
            status = await self.unless_stopped(self.link.status())
            if status is None:
                break
            self.queue_groups, self.queue_room = status.queue_size, status.queue_room
            await self.observe_step(status.current_step)
            if status.current_step >= self.total_steps:
                return await self.finish()
            if (failure := self.reap()) is not None:
                return failure
            self.maybe_start_eval()
            if self.eval_task is None:
                await self.fill_workers()
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
        waits = {asyncio.ensure_future(self.stop.wait()), asyncio.ensure_future(self.worker_done.wait())}
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
            self.worker_done.clear()

    async def finish(self) -> ServeOutcome:
        logger.info("trainer reached step %d of %d; final evaluation", self.step, self.total_steps)
        await self.cancel_workers()
        if self.initial_eval_task is not None:
            await asyncio.gather(self.initial_eval_task, return_exceptions=True)
        await self.evaluate_blocking(self.step, "at the end")
        return self.outcome("completed" if not self.stop.is_set() else "stopped")

    def outcome(self, status: Literal["completed", "stopped", "failed"], error: str | None = None) -> ServeOutcome:
        return ServeOutcome(status=status, step=self.step, groups_posted=self.groups_posted, error=error)

    async def shutdown(self) -> None:
        await self.cancel_workers()
        for task in (self.eval_task, self.initial_eval_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.log_train_row()

    # ---- metrics -------------------------------------------------------------------------------------------
    async def observe_step(self, current_step: int) -> None:
        """On each new trainer step, log what was collected since the last one (at the new step, as atroposlib)."""
        if current_step == self.step:
            return
        self.step = self.env.curr_step = current_step
        await self.log_train_row()

    async def log_train_row(self) -> None:
        stats, self.stats = self.stats, GroupStats()
        stats.record_scored(*self.env.take_dropped())
        try:
            env_values = await self.env.wandb_log({})
        except Exception:
            logger.exception("%s.wandb_log failed; its metrics are skipped this step", type(self.env).__name__)
            env_values = {}
        if stats.empty and not env_values:
            return
        values = {**env_values, **stats.row(), ENV_QUEUE_SIZE: float(self.queue_groups)}
        self.log(self.step, values)

    def log(self, step: int, values: dict[str, float]) -> None:
        logger.info("step %d: %s", step, ", ".join(f"{k}={v:.4g}" for k, v in sorted(values.items())))
        if self.metrics is not None:
            self.metrics.log(step, values)

    # ---- evaluation ----------------------------------------------------------------------------------------
    def maybe_start_eval(self) -> None:
        """Start an evaluation each time the trainer crosses a multiple of ``steps_per_eval``.

        New workers wait while it runs (atroposlib's STOP_TRAIN, softened: groups in flight finish), so the
        evaluation measures one policy and does not compete with sampling for the inference server.
        """
        if self.eval_task is not None and self.eval_task.done():
            self.eval_task = None
        every = self.config.steps_per_eval
        if every <= 0 or self.eval_task is not None or self.step // every <= self.last_eval_step // every:
            return
        self.last_eval_step = self.step
        self.eval_task = asyncio.create_task(self.evaluate_and_log(self.step))

    async def evaluate_blocking(self, step: int, when: str) -> None:
        logger.info("evaluating %s (step %d)", when, step)
        task = asyncio.create_task(self.evaluate_and_log(step))
        stopper = asyncio.create_task(self.stop.wait())
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        task.cancel()
        await asyncio.gather(task, stopper, return_exceptions=True)

    async def evaluate_and_log(self, step: int) -> None:
        """A failed evaluation is logged and skipped: it must not end the training it measures."""
        started = time.monotonic()
        try:
            results = await self.env.evaluate()
        except Exception:
            logger.exception("evaluation at step %d failed; skipped", step)
            return
        values = {k: float(v) for k, v in (results or {}).items() if isinstance(v, int | float)}
        values[EVAL_SECONDS] = time.monotonic() - started
        self.log(step, values)

    # ---- workers -------------------------------------------------------------------------------------------
    def worker_budget(self) -> int:
        """Groups that may be in flight now: none while the API's queue holds ``max_batches_offpolicy`` batches
        of sequences or already holds everything the remaining steps need; else what fills that room. The
        API's cap (``queue_room``) bounds it too: every group in flight must fit when it is posted."""
        group_size = self.config.group_size
        queued_seqs = self.queue_groups * group_size  # the API's queue_size counts groups, as in atroposlib
        room_seqs = self.config.max_batches_offpolicy * self.batch_size - queued_seqs
        needed_seqs = (self.total_steps - self.step) * self.batch_size - queued_seqs
        if room_seqs <= 0 or needed_seqs <= 0:
            return 0
        budget = min(self.config.max_num_workers, math.ceil(room_seqs / group_size))
        if self.queue_room is not None:
            budget = min(budget, self.queue_room // group_size)
        return budget

    async def fill_workers(self) -> None:
        budget = self.worker_budget()
        while len(self.workers) < budget and not self.stop.is_set():
            item = await self.next_item()
            if item is None:
                return
            task = asyncio.create_task(self.work(item))
            task.add_done_callback(lambda _: self.worker_done.set())
            self.workers[task] = item

    async def next_item(self) -> Item | None:
        if self.backlog:
            return self.backlog.pop(0)
        try:
            return await self.env.get_next_item()
        except Exception as exc:
            self.count_failure(exc, None)
            return None

    async def work(self, item: Item) -> None:
        started = time.monotonic()
        result, backlog = await faults.collect(self.env, item, self.config.worker_timeout)
        self.backlog.extend(backlog)
        group = self.checked(result)
        if group is not None:
            self.stats.record_scored(group.scores, group.verdicts())
        if group is None or not self.worth_sending(group):
            self.stats.record_skipped(time.monotonic() - started)
            return
        await self.link.post_group(group)
        self.groups_posted += 1
        self.queue_groups += 1  # until the next /status-env says otherwise: keeps the budget from overshooting
        if self.queue_room is not None:
            self.queue_room = max(0, self.queue_room - group.group_size)
        self.stats.record_posted(group, time.monotonic() - started)

    def checked(self, result: ScoredDataGroup | dict[str, Any] | None) -> ScoredDataGroup | None:
        """The environment's group, validated (``None``: it skipped the item); ``faults.MalformedGroup`` when the
        trainer must not train on it."""
        if result is None:
            return None
        group = faults.validated_group(result, self.vocab_size)
        text_only_answers: int = getattr(self.env.server, "text_only_answers", 0)
        if group.is_test_only() or text_only_answers:
            # Its token ids were re-made from an endpoint's text: the worker fails, loudly, rather than train on it.
            raise InferenceError(
                "the inference server answered with text only (no token ids): such groups are for "
                "rl_test_inference, a training run needs a server that returns the sampled token ids"
            )
        return group

    def worth_sending(self, group: ScoredDataGroup) -> bool:
        """False to skip a checked group: nothing to learn from, or too long for the trainer."""
        if self.config.ensure_scores_are_not_same and not scores_carry_signal(group.scores):
            return False
        overlong = group.overlong_sequence(self.max_token_len)
        if overlong is not None:
            logger.warning("skipping a group: a sequence has %d tokens, the trainer takes %d", overlong[1],
                           self.max_token_len)  # fmt: skip
            return False
        return True

    def reap(self) -> ServeOutcome | None:
        """Collect finished workers; a failed one is counted, logged with its item, and its group skipped. One that
        failed with ``EnvironmentGone`` ends the run at once: no later group could succeed."""
        for task in [t for t in self.workers if t.done()]:
            item = self.workers.pop(task)
            if task.cancelled():
                continue
            exc = task.exception()
            if exc is None:
                self.consecutive_failures = 0
                continue
            self.count_failure(exc, item)
            if isinstance(exc, EnvironmentGone):
                return self.outcome("failed", f"{type(self.env).__name__}: {exc}")
            if self.consecutive_failures >= self.config.max_consecutive_failures:
                break
        return self.streak_failure()

    def streak_failure(self) -> ServeOutcome | None:
        """The run's end when ``env.max_consecutive_failures`` groups in a row failed, naming the last error."""
        limit = self.config.max_consecutive_failures
        if self.consecutive_failures < limit:
            return None
        return self.outcome(
            "failed",
            f"{type(self.env).__name__}: {self.consecutive_failures} groups failed in a row (last: "
            f"{self.last_error}); the environment or the inference server is broken "
            f"(env.max_consecutive_failures = {limit}; the log above has each group's error)",
        )

    def count_failure(self, exc: BaseException, item: Item | None) -> None:
        self.consecutive_failures += 1
        self.last_error = faults.report_fault(exc, item, self.stats)
        now = time.monotonic()
        if now - self.last_fault_row >= FAULT_ROW_S:
            self.last_fault_row = now
            self.log(self.step, self.stats.take_faults())

    async def cancel_workers(self) -> None:
        for task in self.workers:
            task.cancel()
        await asyncio.gather(*self.workers, return_exceptions=True)
        self.workers.clear()
