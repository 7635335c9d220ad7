"""The remote W&B view of a run, fetched at most once per interval per run and cached in the run directory.

Only online runs have a remote view. The local part of a status (metrics files) is always fresh; this part is
returned with its age so a reader knows how old it is.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.runs.table.results import WandbRemote

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


# Serialises check-then-fetch within a process: a notebook's widget refresh thread and a cell asking for status at
# the same moment must not both spend the window.
_FETCH_LOCK = threading.Lock()


def _cached_at(cached: dict[str, Any] | None) -> float | None:
    try:
        return float(cached["fetched_at"]) if cached else None
    except (KeyError, TypeError, ValueError):
        return None  # a damaged cache is treated as none


def _write_cache(path: Path, record: dict[str, Any]) -> None:
    # Atomic, so a reader in another process never sees half a cache (and then queries again).
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    tmp.replace(path)


def _from_cache(url: str | None, cached: dict[str, Any], fetched_at: float, now: float) -> WandbRemote:
    summary = cached.get("summary")
    note = cached.get("note")
    return WandbRemote(
        url=url,
        summary=summary if isinstance(summary, dict) else {},
        fetched_at=fetched_at,
        age_seconds=now - fetched_at,
        note=note if isinstance(note, str) else None,
    )


def remote_summary(paths: RunPaths, *, now: float | None = None) -> WandbRemote | None:
    """The run's W&B summary: cached when younger than the interval, else fetched (a failure is cached too)."""
    info = _read_json(paths.run_dir / TRAINER_RUN_FILE)
    if not info or info.get("mode") != "online" or not info.get("id"):
        return None
    url = info.get("url") if isinstance(info.get("url"), str) else None
    run_path = "/".join(str(part) for part in (info.get("entity"), info.get("project"), info["id"]) if part)
    cache_path = paths.run_dir / CACHE_FILE
    with _FETCH_LOCK:
        now = time.time() if now is None else now
        cached = _read_json(cache_path)
        fetched_at = _cached_at(cached)
        if cached is not None and fetched_at is not None and now - fetched_at < interval_seconds():
            return _from_cache(url, cached, fetched_at, now)
        try:
            summary = _fetch_summary(run_path)
        except Exception as exc:  # W&B down or key revoked: report it, keep the local status, retry next window
            note = f"W&B query failed: {type(exc).__name__}: {exc}"
            _write_cache(cache_path, {"fetched_at": now, "summary": {}, "note": note})
            return WandbRemote(url=url, fetched_at=now, age_seconds=0.0, note=note)
        _write_cache(cache_path, {"fetched_at": now, "summary": summary})
        return WandbRemote(url=url, summary=summary, fetched_at=now, age_seconds=0.0)
