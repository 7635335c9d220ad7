"""Checkpoints and the record of trained-on batches, both in the run directory.

``checkpoints/step_<N>/`` holds the model (``from_pretrained``-loadable), its tokenizer, ``trainer_state.pt``
(optimizer state, step, RNG states) and the run's ``config.yaml``. It is written to a temporary directory and
renamed into place, and only then listed in ``checkpoints.jsonl``, so a crash never leaves a half checkpoint
listed. ``trajectories.jsonl.gz`` gets one gzip member per step (its format and readers:
``hermes_nb.protocol.recorded_batches``).

A full disk (``hermes_nb.system.disk``) fails a write with ``DiskFullError`` and leaves what was there: a
checkpoint that does not fit is removed before the error is raised (which also gives the space back), and a
line or member that does not fit is cut off again, so the previous checkpoint stays listed and both files stay
readable and appendable once space is back.
"""

from __future__ import annotations

import gc
import random
import shutil
import time
from pathlib import Path
from typing import Any

from hermes_nb.config import RunConfig
from hermes_nb.protocol.checkpoints import CheckpointKind, CheckpointRecord
from hermes_nb.protocol.recorded_batches import encode_batch
from hermes_nb.protocol.run_files import CHECKPOINTS_DIR, CHECKPOINTS_FILE, CONFIG_FILE, TRAJECTORIES_FILE
from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.system.disk import DiskFullError, append_record, disk_full_errno
from hermes_nb.trainer.backend import TrainingBackend
from hermes_nb.trainer.step.advantages import with_token_advantages

# A checkpoint being written: ``<prefix><step>_<ns>`` beside the finished ``step_<N>`` directories. A crash
# mid-write leaves one behind, never listed; the crash-point tests catch a write in progress by it.
TEMP_CHECKPOINT_PREFIX = ".tmp_step_"


def checkpoint_root(config: RunConfig, run_dir: Path) -> Path:
    return Path(config.infra.checkpoint_dir) if config.infra.checkpoint_dir else run_dir / CHECKPOINTS_DIR


def rng_state() -> dict[str, Any]:
    import torch

    return {"python": random.getstate(), "torch": torch.get_rng_state()}


def restore_rng(state: dict[str, Any]) -> None:
    import torch

    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(
    backend: TrainingBackend,
    config: RunConfig,
    run_dir: Path,
    step: int,
    kind: CheckpointKind,
    metrics: dict[str, float] | None = None,
) -> CheckpointRecord:
    """Write ``step_<step>`` atomically and append its line to ``checkpoints.jsonl``.

    Raises ``DiskFullError`` naming the checkpoint (or the index) when the disk is full; the checkpoints
    already listed are untouched."""
    root = checkpoint_root(config, run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step}"
    tmp = root / f"{TEMP_CHECKPOINT_PREFIX}{step}_{time.time_ns()}"
    remote, full = _write_or_disk_full(backend, config, tmp, step)
    if full is not None:
        # The writer that failed went with its exception; collected, its open file lets go of the space.
        gc.collect()
        shutil.rmtree(tmp, ignore_errors=True)
        raise DiskFullError(full, f"checkpoint {final}")
    _move_into_place(tmp, final)
    record = CheckpointRecord(
        step=step, path=str(final), time=time.time(), kind=kind, metrics=metrics or {}, tinker_path=remote
    )
    append_record(run_dir / CHECKPOINTS_FILE, (record.model_dump_json() + "\n").encode("utf-8"))
    return record


def _write_or_disk_full(
    backend: TrainingBackend, config: RunConfig, tmp: Path, step: int
) -> tuple[str | None, int | None]:
    """Write the checkpoint's files into ``tmp``: (the backend's remote path, None), or (None, the errno) when the
    disk was full; any other failure is raised.

    The exception of a full disk is not kept: it holds the failed writer (torch's keeps its file open), and the
    space of that file, deleted or not, stays taken for as long as the writer lives."""
    try:
        remote = backend.save_state(tmp, {"step": step, "rng": rng_state()})
        config.save(tmp / CONFIG_FILE)
    except Exception as exc:
        code = disk_full_errno(exc, tmp.parent)  # before any cleanup frees the space it looks at
        if code is None:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return None, code
    return remote, None


def _move_into_place(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final``. An existing ``final`` (a stop right after an interval checkpoint of the same
    step: the newer wins) is moved aside first and removed last, so ``final`` always holds a whole checkpoint."""
    if not final.exists():
        tmp.rename(final)
        return
    old = final.with_name(f".old_{final.name}_{time.time_ns()}")
    final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def temp_checkpoint_step(name: str) -> int:
    """The step of a temporary checkpoint directory's name (``TEMP_CHECKPOINT_PREFIX``)."""
    return int(name.removeprefix(TEMP_CHECKPOINT_PREFIX).split("_", 1)[0])


def load_checkpoint(backend: TrainingBackend, path: Path) -> int:
    """Restore weights, optimizer and RNG from a checkpoint directory; returns its step."""
    state = backend.load_state(path)
    if "rng" in state:
        restore_rng(state["rng"])
    return int(state.get("step", 0))


def record_batch(run_dir: Path, step: int, batch: list[ScoredDataGroup]) -> None:
    """Append the batch of ``step`` as one gzip member, whole or not at all (``DiskFullError`` when full). Each
    group is recorded with the per-token advantages this trainer used, so readers (the rollout viewer) need not
    know how they are computed."""
    recorded = [with_token_advantages(group) for group in batch]
    append_record(run_dir / TRAJECTORIES_FILE, encode_batch(step, recorded), line_records=False)
