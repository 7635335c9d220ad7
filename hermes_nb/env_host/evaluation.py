"""When the environment evaluates during ``serve``: before training (alongside the first groups), each time the
trainer crosses a multiple of ``steps_per_eval`` (new workers wait meanwhile) and at the end."""

from __future__ import annotations

import asyncio
import logging
import time

from hermes_nb.env.base import BaseEnv
from hermes_nb.env_host.step_metrics import StepMetrics
from hermes_nb.protocol.metrics import EVAL_SECONDS

logger = logging.getLogger(__name__)


class EvalSchedule:
    """The evaluation running now, if any, and the step of the last one started."""

    def __init__(self, env: BaseEnv, metrics: StepMetrics, stop: asyncio.Event):
        self.env = env
        self.metrics = metrics
        self.stop = stop
        self.task: asyncio.Task[None] | None = None
        self.initial_task: asyncio.Task[None] | None = None
        self.last_step = 0

    @property
    def running(self) -> bool:
        """A scheduled evaluation holds new workers back (the initial one does not)."""
        return self.task is not None

    def start_initial(self, step: int) -> None:
        # Unlike later evaluations, the first one does not hold the workers back: the policy cannot change
        # before the trainer has a first batch, which only these workers can produce, so it measures the
        # starting policy either way (the trainer's first step after it ends is the exception) while the
        # first step comes sooner. Its requests share the inference server's batches with the workers'.
        logger.info("evaluating before training (step %d), alongside the first groups", step)
        self.initial_task = asyncio.create_task(self.evaluate_and_log(step))

    def maybe_start(self, step: int) -> None:
        """Start an evaluation each time the trainer crosses a multiple of ``steps_per_eval``.

        New workers wait while it runs (atroposlib's STOP_TRAIN, softened: groups in flight finish), so the
        evaluation measures one policy and does not compete with sampling for the inference server.
        """
        if self.task is not None and self.task.done():
            self.task = None
        every = self.env.config.steps_per_eval
        if every <= 0 or self.task is not None or step // every <= self.last_step // every:
            return
        self.last_step = step
        self.task = asyncio.create_task(self.evaluate_and_log(step))

    async def at_end(self, step: int) -> None:
        """The initial evaluation finished, then the final one, unless ``stop`` comes first."""
        if self.initial_task is not None:
            await asyncio.gather(self.initial_task, return_exceptions=True)
        await self.evaluate_blocking(step, "at the end")

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
        self.metrics.log(step, values)

    async def cancel(self) -> None:
        for task in (self.task, self.initial_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
