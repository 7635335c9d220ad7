"""``rl_get_samples``: the rollout viewer's core call (``%rl_samples`` and the samples widget are over it)."""

from __future__ import annotations

import asyncio

from hermes_nb.rollouts.samples import DEFAULT_SAMPLES, SampleOrder, SampleView


async def rl_get_samples(
    run_id: str | None = None,
    step: int | None = None,
    order: SampleOrder = "recorded",
    n: int = DEFAULT_SAMPLES,
    min_score: float | None = None,
    max_score: float | None = None,
) -> SampleView:
    """The sampled conversations of a step (default: the last recorded) of a run (default: the newest), with
    their scores, verdicts and advantages: those scored in ``[min_score, max_score]``, ``order`` ``recorded``,
    ``worst`` or ``best`` first, at most ``n``. Reads the run's recorded trajectories; works on running runs."""
    from hermes_nb.rollouts.reader import read_samples  # the trajectory reader, only when asked

    return await asyncio.to_thread(read_samples, run_id, step, order, n, min_score, max_score)
