"""``sweep.json``: the state of one sweep, shared by the kernel that asked for it, its driver and any reader.

A sweep is a list of variants, each a set of config overrides run as one normal run. The driver
(``hermes_nb.runs.sweeps.driver``, a detached process) is the only writer while it lives; it writes atomically
(``hermes_nb.runs.sweep_dirs``), so a reader always sees a whole record. A variant's run status is not copied here:
the run's own ``run.json`` says it, and a reader looks there.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hermes_nb.protocol.run_state import ProcessRecord

SweepStatusName = Literal["running", "stopping", "completed", "stopped", "failed"]
SWEEP_TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "stopped", "failed"})


class StopRule(BaseModel):
    """Stop a run whose held-out accuracy at ``step`` is more than ``below_best_by`` percentage points below the
    best accuracy any run of the sweep had at that step ("at step S": its first evaluation at step S or later)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: int = Field(ge=1, description="the trainer step at which runs are compared")
    below_best_by: float = Field(gt=0, le=100, description="percentage points of held-out accuracy")


class Variant(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: int
    overrides: dict[str, Any]  # dotted config names (as rl_edit_config takes them) -> the values given
    run_id: str | None = None  # set once the driver started its run
    start_error: str | None = None  # the run could not be started: why (the driver went on with the next one)
    early_stopped: str | None = None  # the stop rule stopped its run: why, with both accuracies


class SweepState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sweep_id: str
    name: str
    environment: str
    status: SweepStatusName = "running"
    created_at: float = Field(default_factory=time.time)
    ended_at: float | None = None
    max_concurrent: int = Field(ge=1)
    stop_if: StopRule | None = None
    # Health checks (``hermes_nb.health``) whose finding stops a variant's run: added to every variant's
    # ``health.stop_on``, so each run stops itself, gracefully with its checkpoint, where its metrics are written.
    stop_on_health: list[str] = Field(default_factory=list)
    variants: list[Variant]
    driver: ProcessRecord | None = None
    stop_requested_at: float | None = None
    error: str | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status in SWEEP_TERMINAL_STATUSES
