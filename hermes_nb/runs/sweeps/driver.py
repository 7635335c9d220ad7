"""A sweep's driver: one detached process per sweep that starts its variants' runs, at most ``max_concurrent``
live at once, the next when one ends, until none is left; then it names the sweep completed and exits.

It is not the kernel: like a run's supervisor it is double-forked and nobody's child, so a sweep goes on through
a kernel restart. It is the only writer of ``sweep.json`` while it lives. Each variant is a normal run
(``launcher.start_run``: its own supervisor, processes, secret and logs), stopped through the normal stop.
SIGTERM asks it to stop the sweep: its live runs are stopped (each saves its final checkpoint), no more start.

    python -m hermes_nb.runs.sweeps.driver [--detach] SWEEP_ID
"""

from __future__ import annotations

import logging
import signal
import sys
import time
import traceback
from dataclasses import dataclass

import psutil

from hermes_nb.config import RunConfig
from hermes_nb.errors import HermesNBError
from hermes_nb.protocol.run_state import ProcessRecord
from hermes_nb.protocol.sweep_state import StopRule, SweepState, Variant
from hermes_nb.runs import launcher
from hermes_nb.runs.supervision import stop
from hermes_nb.runs.supervision.damage import current_state
from hermes_nb.runs.sweep_dirs import driver_log, read_sweep, variant_config, write_sweep
from hermes_nb.runs.sweeps.variants import eval_accuracy_at
from hermes_nb.system import processes
from hermes_nb.system.home import run_paths

log = logging.getLogger("hermes_nb.sweep")

# A run takes seconds to start and minutes to train: a second poll wastes nothing and costs no CPU to speak of.
POLL_SECONDS = 0.5


def run_is_live(run_id: str) -> bool:
    paths = run_paths(run_id)
    return paths.state.is_file() and not current_state(paths)[0].is_terminal


def early_stop_reason(rule: StopRule, mine: float, best: float) -> str | None:
    """Why a run at ``mine`` held-out accuracy should stop when the best at the rule's step is ``best`` (None:
    it should not). Accuracies are shares (0-1); the rule's margin is in percentage points."""
    if 100 * (best - mine) <= rule.below_best_by:
        return None
    return (
        f"held-out accuracy {100 * mine:.1f}% at step {rule.step} is more than {rule.below_best_by:g} points below "
        f"the best run's {100 * best:.1f}%"
    )


@dataclass
class Driver:
    state: SweepState
    stop_requested: bool = False

    def save(self) -> None:
        write_sweep(self.state)

    def on_sigterm(self, signum: int, frame: object) -> None:
        self.stop_requested = True

    def live(self) -> list[Variant]:
        return [v for v in self.state.variants if v.run_id is not None and run_is_live(v.run_id)]

    def pending(self) -> list[Variant]:
        return [v for v in self.state.variants if v.run_id is None and v.start_error is None]

    def start(self, variant: Variant) -> None:
        try:
            _, run_state, _ = launcher.start_run(RunConfig.load(variant_config(self.state.sweep_id, variant.index)))
        except HermesNBError as exc:  # this variant cannot run (its model went away ...): the others still can
            variant.start_error = str(exc)
            log.warning("variant %d could not start: %s", variant.index, exc)
        else:
            variant.run_id = run_state.run_id
            log.info("variant %d %s: run %s", variant.index, variant.overrides, run_state.run_id)
        self.save()

    def apply_stop_rule(self) -> None:
        rule = self.state.stop_if
        if rule is None:
            return
        accuracy = {v.index: eval_accuracy_at(v.run_id, rule.step) for v in self.state.variants if v.run_id}
        known = [value for value in accuracy.values() if value is not None]
        if not known:
            return
        best = max(known)
        for variant in self.live():
            mine = accuracy.get(variant.index)
            reason = None if mine is None or variant.early_stopped else early_stop_reason(rule, mine, best)
            if reason is None or variant.run_id is None:
                continue
            variant.early_stopped = reason
            self.save()  # the reason first: a reader who sees the run stopping knows why
            log.info("variant %d (run %s): stopped early: %s", variant.index, variant.run_id, reason)
            stop.stop_run(variant.run_id, wait=False)

    def tick(self) -> bool:
        """One look: the stop rule, then start what there is room for. False once every variant has ended."""
        self.apply_stop_rule()
        live, pending = self.live(), self.pending()
        if not live and not pending:
            return False
        for variant in pending[: max(0, self.state.max_concurrent - len(live))]:
            if self.stop_requested:
                break
            self.start(variant)
        return True

    def stop(self) -> None:
        self.state.status = "stopping"
        self.state.stop_requested_at = self.state.stop_requested_at or time.time()
        self.save()
        live = [v.run_id for v in self.live() if v.run_id]
        for run_id in live:  # every run is asked first, so they save their final checkpoints side by side
            stop.stop_run(run_id, wait=False)
        for run_id in live:
            stop.stop_run(run_id, wait=True)
        self.finish("stopped")

    def finish(self, status: str, error: str | None = None) -> None:
        self.state = self.state.model_copy(update={"status": status, "ended_at": time.time(), "error": error})
        self.save()
        log.info("sweep %s %s", self.state.sweep_id, status)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.on_sigterm)
        signal.signal(signal.SIGINT, self.on_sigterm)
        try:
            while not self.stop_requested and self.tick():
                time.sleep(POLL_SECONDS)
            if self.stop_requested:
                self.stop()
            else:
                self.finish("completed")
            return 0
        except Exception:  # the driver must never die leaving its sweep marked live
            self.finish("failed", error=traceback.format_exc(limit=5))
            return 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m hermes_nb.runs.sweeps.driver SWEEP_ID", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s sweep %(levelname)s %(message)s", stream=sys.stderr)
    state = read_sweep(args[0])
    me = psutil.Process()
    record = ProcessRecord(name="sweep", pid=me.pid, started_at=me.create_time(), log_path=str(driver_log(args[0])))
    driver = Driver(state=state.model_copy(update={"driver": record}))
    driver.save()
    return driver.run()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--detach":
        raise SystemExit(processes.run_detached(lambda: main([sys.argv[2]])))
    raise SystemExit(main())
