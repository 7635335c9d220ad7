"""Where the files of one run live. The run directory plus the log files are the whole record of a run."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from hermes_nb import home
from hermes_nb.protocol.checkpoints import CHECKPOINTS_FILE

PROCESS_NAMES = ("api", "trainer", "env")


class RunPaths(BaseModel):
    run_id: str
    run_dir: Path
    config: Path
    state: Path
    metrics: Path
    env_metrics: Path
    checkpoints_dir: Path
    checkpoints_index: Path
    trajectories: Path
    logs: dict[str, Path]

    @classmethod
    def for_run(cls, run_id: str) -> RunPaths:
        run_dir = home.run_dir(run_id)
        logs = {name: home.logs_dir() / f"{name}_{run_id}.log" for name in (*PROCESS_NAMES, "supervisor")}
        return cls(
            run_id=run_id,
            run_dir=run_dir,
            config=run_dir / "config.yaml",
            state=run_dir / "run.json",
            metrics=run_dir / "metrics.jsonl",
            env_metrics=run_dir / "env_metrics.jsonl",
            checkpoints_dir=run_dir / "checkpoints",
            checkpoints_index=run_dir / CHECKPOINTS_FILE,
            trajectories=run_dir / "trajectories.jsonl.gz",
            logs=logs,
        )
