"""The async run-lifecycle commands (`rl_start_training` ...) of the public surface; ``hermes_nb.api`` re-exports them.

They are the async face of the synchronous run service (``runs/service.py``, which the widgets call) and of the
run readers (history, notes). The work is blocking file and process handling, so each call runs it in a worker
thread: a notebook's event loop is never blocked by a stop that waits for a final checkpoint.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from hermes_nb.runs import service
from hermes_nb.runs.estimate import RunEstimate
from hermes_nb.runs.run_dirs import resolve_run
from hermes_nb.runs.supervision.stop import StopResult
from hermes_nb.runs.table import history, notes
from hermes_nb.runs.table.notes import TagResult
from hermes_nb.runs.table.removal import RemovalResult
from hermes_nb.runs.table.results import LogTail, RunList, RunResults, RunStatus, StartResult
from hermes_nb.runs.table.rows import RunsTable


async def rl_start_training(resume_from: str | None = None, **overrides: Any) -> StartResult:
    """Start a run of the selected environment with the current config (plus ``overrides``, not saved).

    ``overrides`` take the same names as ``rl_edit_config`` (``total_steps=5``, ``trainer.learning_rate=1e-3``
    via ``**{"trainer.learning_rate": 1e-3}``) and are validated the same way, all-or-nothing.
    ``resume_from=<run id>`` continues that stopped or failed run from its last checkpoint, with its config and
    optimizer state; step numbers continue (raise ``total_steps`` to go further than it was to go).
    """
    return await asyncio.to_thread(service.start_training, resume_from, **overrides)


async def rl_estimate_run(**overrides: Any) -> RunEstimate:
    """Before starting: the run's memory per process against what this machine has free, seconds per step and in
    all (from earlier runs of the same model and sizes, else a stated cost: ``time_source`` says which), tokens
    sampled and trained, and a Tinker run's price from ``<hermes home>/prices.yaml``. ``overrides`` as
    ``rl_start_training``'s; nothing is started or saved."""
    return await asyncio.to_thread(service.estimate_run, **overrides)


async def rl_check_status(run_id: str | None = None) -> RunStatus:
    """Status of a run (the newest when ``run_id`` is None): processes, progress, latest metrics, errors."""
    return await asyncio.to_thread(service.check_status, run_id)


async def rl_stop_training(run_id: str | None = None, wait: bool = True) -> StopResult:
    """Stop a run gracefully (final checkpoint first); idempotent."""
    return await asyncio.to_thread(service.stop_training, run_id, wait)


async def rl_list_runs() -> RunList:
    """Every run in this home, newest first, with its status."""
    return await asyncio.to_thread(history.list_runs)


async def rl_get_results(run_id: str | None = None, download: bool = False) -> RunResults:
    """Final and best metrics, the metric history, checkpoints and the final weights path of a run.

    ``download=True`` (a run on the Tinker backend): fetch the final weights from the Tinker server into the run
    directory first, as a model ``from_pretrained`` loads (merged; or the adapter, naming its base, when the base
    model is not on this machine), and give that directory as ``final_weights_path``."""
    results = await asyncio.to_thread(history.get_results, run_id)
    if not download:
        return results
    from hermes_nb.tinker.weights import download_in_child

    weights = await asyncio.to_thread(download_in_child, resolve_run(results.run_id).run_dir)
    return results.model_copy(update={"final_weights_path": str(weights)})


async def rl_tail_logs(run_id: str | None = None, process: str = "trainer", lines: int = 50) -> LogTail:
    """The last ``lines`` lines of a run's ``api``, ``trainer``, ``env`` or ``supervisor`` log."""
    return await asyncio.to_thread(history.tail_logs, run_id, process, lines)


async def rl_compare_runs(
    runs: Sequence[str] | None = None,
    baseline: str | None = None,
    sort_by: str = "created",
    descending: bool | None = None,
    sweep: str | None = None,
) -> RunsTable:
    """The runs table: one row per run (default: every run; ``sweep=``: that sweep's) with its status, what differs
    in its config from ``baseline`` (default: the oldest run shown), best and last held-out accuracy and reward,
    steps, wall time, sweep and note. ``sort_by``: ``created``, ``best_eval``, ``last_eval``, ``best_reward``,
    ``last_reward``, ``steps``, ``wall``, ``run``, ``status``, ``environment``, ``sweep`` or ``note`` (best and
    newest first unless ``descending`` says otherwise). Each row's ``label`` names what varies: ``lr=3e-4, group=8``."""
    return await asyncio.to_thread(service.compare_runs, runs, baseline, sort_by, descending, sweep)


async def rl_tag_run(run_id: str, note: str) -> TagResult:
    """Set a run's note (one line, shown in the runs table); an empty note removes it."""
    run, text = await asyncio.to_thread(notes.tag_run, run_id, note)
    return TagResult(run_id=run, note=text)


async def rl_delete_run(run_id: str, confirm: bool = False, archive: bool = False) -> RemovalResult:
    """Delete a run's directory and its logs (``archive=True``: move them to ``<home>/archive``). Never a live run.
    Without ``confirm=True`` nothing changes: the answer lists what would go."""
    return await asyncio.to_thread(service.delete_run, run_id, confirm, archive)
