"""A sweep's directory: ``<home>/sweeps/<sweep_id>/`` with ``sweep.json`` (``hermes_nb.protocol.sweep_state``)
and one ``variant_<i>.yaml`` per variant (the whole config its run starts from, checked before the sweep began).

Writing is atomic (temp file, rename); the driver is the only writer while it lives. It stands beside
``run_dirs.py``, below the runs table and the sweeps: the table reads which sweep started each run from here, and
the sweeps (``hermes_nb.runs.sweeps``) build on the table's rows.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from hermes_nb.errors import HermesNBError
from hermes_nb.protocol.run_files import SWEEP_FILE, SWEEP_VARIANT_CONFIG, sweep_log_file_name
from hermes_nb.protocol.sweep_state import SweepState
from hermes_nb.system import home


def sweep_dir(sweep_id: str) -> Path:
    return home.sweeps_dir() / sweep_id


def sweep_file(sweep_id: str) -> Path:
    return sweep_dir(sweep_id) / SWEEP_FILE


def variant_config(sweep_id: str, index: int) -> Path:
    return sweep_dir(sweep_id) / SWEEP_VARIANT_CONFIG.format(index=index)


def driver_log(sweep_id: str) -> Path:
    return home.logs_dir() / sweep_log_file_name(sweep_id)


def known_sweep_ids() -> list[str]:
    """Sweep ids, newest first (they start with their UTC creation time, like run ids)."""
    root = home.sweeps_dir()
    if not root.is_dir():
        return []
    return sorted((p.name for p in root.iterdir() if (p / SWEEP_FILE).is_file()), reverse=True)


def read_sweep(sweep_id: str) -> SweepState:
    path = sweep_file(sweep_id)
    if not path.is_file():
        known = ", ".join(known_sweep_ids()[:10]) or "none yet"
        raise HermesNBError(f"unknown sweep {sweep_id!r}; known sweeps: {known}")
    try:
        return SweepState.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError) as exc:
        raise HermesNBError(f"sweep {sweep_id}: {path} cannot be read ({str(exc).splitlines()[0]})") from None


def write_sweep(state: SweepState) -> None:
    path = sweep_file(state.sweep_id)
    tmp = path.with_name(f".{SWEEP_FILE}.{os.getpid()}.tmp")
    tmp.write_text(state.model_dump_json(indent=2), encoding="utf-8")
    tmp.replace(path)


def sweep_of_runs() -> dict[str, str]:
    """Run id -> the sweep that started it, for every sweep in this home (the runs table's sweep column)."""
    owners: dict[str, str] = {}
    for sweep_id in known_sweep_ids():
        try:
            state = read_sweep(sweep_id)
        except HermesNBError:
            continue  # an unreadable sweep claims no runs; rl_sweep_status names its problem
        owners.update({v.run_id: sweep_id for v in state.variants if v.run_id})
    return owners
