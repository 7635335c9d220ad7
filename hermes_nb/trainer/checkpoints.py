"""Checkpoints and the record of trained-on batches, both in the run directory.

``checkpoints/step_<N>/`` holds the model (``from_pretrained``-loadable), its tokenizer, ``trainer_state.pt``
(optimizer state, step, RNG states) and the run's ``config.yaml``. It is written to a temporary directory and
renamed into place, and only then listed in ``checkpoints.jsonl``, so a crash never leaves a half checkpoint
listed. ``trajectories.jsonl.gz`` gets one gzip member per step (one JSON line: the step and its groups); a
reader skips a truncated last member, which is what a crash mid-write leaves.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hermes_nb.config import RunConfig
from hermes_nb.protocol.checkpoints import CHECKPOINTS_FILE, CheckpointKind, CheckpointRecord
from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.trainer.backend import TrainingBackend

CHECKPOINTS_DIR = "checkpoints"
TRAJECTORIES_FILE = "trajectories.jsonl.gz"
CONFIG_FILE = "config.yaml"


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
    """Write ``step_<step>`` atomically and append its line to ``checkpoints.jsonl``."""
    root = checkpoint_root(config, run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step}"
    tmp = root / f".tmp_step_{step}_{time.time_ns()}"
    backend.save_state(tmp, {"step": step, "rng": rng_state()})
    config.save(tmp / CONFIG_FILE)
    if final.exists():  # e.g. a stop right after an interval checkpoint of the same step: the newer wins
        shutil.rmtree(final)
    tmp.rename(final)
    record = CheckpointRecord(step=step, path=str(final), time=time.time(), kind=kind, metrics=metrics or {})
    with (run_dir / CHECKPOINTS_FILE).open("a", encoding="utf-8") as f:
        f.write(record.model_dump_json() + "\n")
        f.flush()
    return record


def load_checkpoint(backend: TrainingBackend, path: Path) -> int:
    """Restore weights, optimizer and RNG from a checkpoint directory; returns its step."""
    state = backend.load_state(path)
    if "rng" in state:
        restore_rng(state["rng"])
    return int(state.get("step", 0))


def record_batch(run_dir: Path, step: int, batch: list[ScoredDataGroup]) -> None:
    """Append the batch of ``step`` as one gzip member (closed at once, so it is complete on disk)."""
    line = json.dumps({"step": step, "groups": [g.model_dump(mode="json", exclude_none=True) for g in batch]})
    with gzip.open(run_dir / TRAJECTORIES_FILE, "ab") as f:
        f.write(line.encode("utf-8") + b"\n")


def read_trajectories(path: Path) -> Iterator[tuple[int, list[ScoredDataGroup]]]:
    """Yield ``(step, groups)`` per recorded step; stops quietly at a truncated or corrupt tail."""
    data = path.read_bytes()
    while data:
        decompressor = zlib.decompressobj(wbits=31)  # 31 = gzip header, one member per object
        try:
            text = decompressor.decompress(data)
        except zlib.error:
            return
        if not decompressor.eof:
            return
        data = decompressor.unused_data
        for line in text.decode("utf-8").splitlines():
            row = json.loads(line)
            yield int(row["step"]), [ScoredDataGroup.model_validate(g) for g in row["groups"]]
