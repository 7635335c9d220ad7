"""The remote W&B view of a run, fetched at most once per interval per run and cached in the run directory.

Only online runs have a remote view. The local part of a status (metrics files) is always fresh; this part is
returned with its age so a reader knows how old it is.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from hermes_nb.runs.layout import RunPaths
from hermes_nb.runs.reports import WandbRemote

# W&B's API is rate-limited and slow; a status call every few seconds must not hit it each time.
DEFAULT_INTERVAL_SECONDS = 30 * 60
INTERVAL_ENV_VAR = "HERMES_NB_WANDB_STATUS_INTERVAL"
CACHE_FILE = "wandb_remote.json"
# Written by hermes_nb.metrics.logger when the trainer's W&B run starts.
TRAINER_RUN_FILE = "wandb_trainer.json"


def interval_seconds() -> float:
    raw = os.environ.get(INTERVAL_ENV_VAR)
    try:
        return float(raw) if raw else DEFAULT_INTERVAL_SECONDS
    except ValueError:
        return DEFAULT_INTERVAL_SECONDS


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _fetch_summary(run_path: str) -> dict[str, Any]:
    import wandb  # heavy; only when a remote query is really due

    run = wandb.Api(timeout=15).run(run_path)
    return {k: v for k, v in dict(run.summary).items() if isinstance(v, int | float | str)}


def remote_summary(paths: RunPaths, *, now: float | None = None) -> WandbRemote | None:
    info = _read_json(paths.run_dir / TRAINER_RUN_FILE)
    if not info or info.get("mode") != "online" or not info.get("id"):
        return None
    run_path = "/".join(str(part) for part in (info.get("entity"), info.get("project"), info["id"]) if part)
    now = time.time() if now is None else now
    cache_path = paths.run_dir / CACHE_FILE
    cached = _read_json(cache_path)
    if cached and now - float(cached.get("fetched_at", 0)) < interval_seconds():
        fetched_at = float(cached["fetched_at"])
        return WandbRemote(
            url=info.get("url"), summary=cached.get("summary", {}), fetched_at=fetched_at, age_seconds=now - fetched_at
        )
    try:
        summary = _fetch_summary(run_path)
    except Exception as exc:  # W&B down or key revoked: report it, keep the local status
        note = f"W&B query failed: {type(exc).__name__}: {exc}"
        return WandbRemote(url=info.get("url"), note=note)
    cache_path.write_text(json.dumps({"fetched_at": now, "summary": summary}), encoding="utf-8")
    return WandbRemote(url=info.get("url"), summary=summary, fetched_at=now, age_seconds=0.0)
