"""The crash-point matrix (issue #15, item 6): ``kill -9`` of one process of a real run at one phase of its life,
then what a user relies on afterwards. ``tests/e2e/test_crash_points.py`` runs a sample of it, ``bench/
crash_points.py`` all of it; both call ``run_case`` with the arithmetic environment and configs/quick_test.yaml
selected, in a home of their own.

A case is a victim (``VICTIMS``) and a phase (``PHASES``):

- ``startup``: killed as soon as ``run.json`` records the victim's pid, while the run is still ``starting``;
- ``steady``: ``running``, step >= 2;
- ``checkpoint``: while the trainer writes a checkpoint (``save_checkpoint_interval: 1``). The checkpoint's
  temporary directory is caught by polling the checkpoint folder; the trainer is frozen with SIGSTOP at once, and
  if the directory is still there the write is certainly under way: the victim is killed, then the trainer
  continued (SIGCONT; a trainer victim is killed frozen). A write that finished before the freeze is let go and
  a later step tried. Steps from 2 on only, so that a checkpoint is already listed when the write is cut;
- ``stop``: ``rl_stop_training`` runs in a thread; killed once ``run.json`` says ``stopping``.

The checks: a separate ``rl_check_status`` call reads the right terminal status within ``STATUS_BOUND_S`` of the
kill (``expected_status``); no process of the run is left (the pids in ``run.json`` with their start times, the
descendants seen just before the kill, and any process holding the run's secret in its environment);
``checkpoints.jsonl``, ``metrics.jsonl`` and ``env_metrics.jsonl`` parse up to their last complete line, the
trainer's steps run 1..N without a gap, and the last listed checkpoint loads with ``from_pretrained``;
``rl_start_training(**{"trainer.resume_from": run_id})`` continues from that checkpoint (the resumed run's first
step is the one after it), or is refused with a ``TransferError`` naming the missing checkpoint when none is
listed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from run_helpers import alive, run, wait_for_status

from hermes_nb.api import rl_check_status, rl_start_training, rl_stop_training
from hermes_nb.config import RunConfig
from hermes_nb.errors import TransferError
from hermes_nb.metrics.reader import read_metrics_file
from hermes_nb.protocol.auth import SECRET_ENV
from hermes_nb.protocol.checkpoints import CheckpointRecord, read_checkpoint_index
from hermes_nb.protocol.run_files import TRAINER_STATE_FILE, RunPaths
from hermes_nb.protocol.run_state import ProcessRecord, RunState, read_run_state
from hermes_nb.runs.table.results import RunStatus
from hermes_nb.system import processes
from hermes_nb.system.home import run_paths
from hermes_nb.system.secrets import read_run_secret
from hermes_nb.trainer.run.checkpoints import TEMP_CHECKPOINT_PREFIX, temp_checkpoint_step

VICTIMS = ("supervisor", "api", "trainer", "env")
PHASES = ("startup", "steady", "checkpoint", "stop")
# The bound: from the kill to a status call that reads the run's terminal state.
STATUS_BOUND_S = 2.0
# Long enough that no case completes by itself while it is being set up.
TOTAL_STEPS = 500
# Start-up on two loaded cores (torch imports, the model, health checks); a healthy one takes ~10 s.
PHASE_TIMEOUT_S = 180.0
# Past the bound, status keeps being read this long, so a slow answer is measured rather than only failed.
STATUS_WATCH_S = 30.0
# The supervisor ends what is left in at most 3 x its 10 s peer grace (hermes_nb.runs.supervision.graces);
# reconcile in 5 s.
CLEAN_TIMEOUT_S = 40.0
# Phases are caught by polling run.json and the checkpoint folder: a checkpoint of the quick model takes tens of
# milliseconds to write, and polling faster only takes more of the two cores the run needs.
FAST_POLL_S = 0.003
# Writes that end between a poll and the freeze are let go and a later one tried; this many, and the case gives up.
CHECKPOINT_TRIES = 25


@dataclass
class CaseResult:
    victim: str
    phase: str
    caught: str = ""  # how the phase was reached
    status: str = ""  # the terminal status a separate call read after the kill
    # From the kill to that call's answer; when a stop goes on after the kill (stop_goes_on), from the moment the
    # trainer was last seen alive.
    status_seconds: float | None = None
    clean_seconds: float | None = None  # from the kill until no process of the run was left
    checkpoint: str = ""  # the last listed checkpoint and whether it loaded
    resume: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.victim}@{self.phase}"

    @property
    def passed(self) -> bool:
        return not self.problems


@dataclass
class Case:
    """One case under way: its run and what was seen just before the kill."""

    result: CaseResult
    run_id: str = ""
    killed_at: float = 0.0  # time.monotonic() of the kill
    family: list[psutil.Process] = field(default_factory=list)
    frozen: ProcessRecord | None = None  # the trainer, while SIGSTOPped
    trainer: ProcessRecord | None = None  # as run.json named it at the kill
    stop_thread: threading.Thread | None = None
    stop_outcome: dict[str, Any] = field(default_factory=dict)

    @property
    def paths(self) -> RunPaths:
        return run_paths(self.run_id)


class PhaseMissed(Exception):
    """The run never reached the phase (or left it before the kill); the case is a failure, not a crash test."""


def run_case(victim: str, phase: str) -> CaseResult:
    """Start a run, kill ``victim`` with SIGKILL at ``phase``, check everything; the run is ended whatever happens."""
    case = Case(CaseResult(victim=victim, phase=phase))
    try:
        case.run_id = run(rl_start_training(**overrides_for(phase))).run_id
        record = PHASE_REACHERS[phase](case, victim)
        kill(case, record)
        check_status(case)
        check_clean(case)
        check_files(case)
        check_stop_call(case)
        check_resume(case)
    except PhaseMissed as missed:
        case.result.problems.append(f"phase not reached: {missed}")
    except Exception as exc:  # a wait that timed out, a start refused: the case's finding, and the next case runs
        case.result.problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        end_case(case)
    return case.result


def overrides_for(phase: str) -> dict[str, Any]:
    overrides: dict[str, Any] = {"total_steps": TOTAL_STEPS}
    if phase == "checkpoint":
        overrides["trainer.save_checkpoint_interval"] = 1
    return overrides


# ---- reaching a phase ----------------------------------------------------------------------------------------
def poll_state(case: Case, ready: Callable[[RunState], bool], what: str) -> RunState:
    """``run.json`` once ``ready`` holds for it (read every few milliseconds)."""
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while time.monotonic() < deadline:
        state = read_run_state(case.paths.run_dir)
        if ready(state):
            return state
        if state.is_terminal:
            raise PhaseMissed(f"the run ended ({state.status}: {state.error}) before {what}")
        time.sleep(FAST_POLL_S)
    raise PhaseMissed(f"no {what} within {PHASE_TIMEOUT_S:.0f} s")


def reach_startup(case: Case, victim: str) -> ProcessRecord:
    state = poll_state(case, lambda s: victim in s.processes, f"pid of the {victim} in run.json")
    if state.status != "starting":
        raise PhaseMissed(f"the run was already {state.status} when the {victim}'s pid was recorded")
    case.result.caught = "pid recorded, run starting"
    return state.processes[victim]


def reach_steady(case: Case, victim: str) -> ProcessRecord:
    status = wait_for_status(case.run_id, lambda s: s.status == "running" and s.step >= 2, PHASE_TIMEOUT_S)
    case.result.caught = f"running, step {status.step}"
    return read_run_state(case.paths.run_dir).processes[victim]


def reach_checkpoint(case: Case, victim: str) -> ProcessRecord:
    """Freeze the trainer in the middle of a checkpoint write (see the module's docstring)."""
    wait_for_status(case.run_id, lambda s: s.status == "running" and s.step >= 1, PHASE_TIMEOUT_S)
    state = read_run_state(case.paths.run_dir)
    trainer = state.processes["trainer"]
    for attempt in range(1, CHECKPOINT_TRIES + 1):
        temp = next_temp_checkpoint(case.paths.checkpoints_dir, min_step=2)
        processes.send_signal(trainer, signal.SIGSTOP)
        case.frozen = trainer
        if temp.is_dir():
            case.result.caught = f"{temp.name}: trainer frozen mid-write (SIGSTOP), try {attempt}"
            return state.processes[victim]
        processes.send_signal(trainer, signal.SIGCONT)  # the write ended before the freeze: try a later step
        case.frozen = None
    raise PhaseMissed(f"every one of {CHECKPOINT_TRIES} checkpoint writes ended before the trainer was frozen")


def next_temp_checkpoint(root: Path, *, min_step: int) -> Path:
    """The first temporary checkpoint directory of a step >= ``min_step`` to appear under ``root``."""
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            names = [entry.name for entry in os.scandir(root)]
        except FileNotFoundError:
            names = []
        for name in names:
            if name.startswith(TEMP_CHECKPOINT_PREFIX) and temp_checkpoint_step(name) >= min_step:
                return root / name
        time.sleep(FAST_POLL_S)
    raise PhaseMissed(f"no checkpoint write of step >= {min_step} within {PHASE_TIMEOUT_S:.0f} s")


def reach_stop(case: Case, victim: str) -> ProcessRecord:
    wait_for_status(case.run_id, lambda s: s.status == "running" and s.step >= 2, PHASE_TIMEOUT_S)

    def stop() -> None:
        try:
            case.stop_outcome["result"] = run(rl_stop_training(case.run_id))
        except Exception as exc:  # reported by check_stop_call
            case.stop_outcome["error"] = exc

    case.stop_thread = threading.Thread(target=stop, name=f"stop {case.run_id}", daemon=True)
    case.stop_thread.start()
    state = poll_state(case, lambda s: s.status == "stopping", "'stopping' in run.json")
    case.result.caught = "stopping (rl_stop_training in a thread)"
    return state.processes[victim]


PHASE_REACHERS: dict[str, Callable[[Case, str], ProcessRecord]] = {
    "startup": reach_startup,
    "steady": reach_steady,
    "checkpoint": reach_checkpoint,
    "stop": reach_stop,
}


# ---- the kill ------------------------------------------------------------------------------------------------
def kill(case: Case, victim: ProcessRecord) -> None:
    """SIGKILL the victim, after noting every process of the run; a frozen trainer that is not the victim is
    continued at once, so its checkpoint write goes on as if the kill had come in the middle of it."""
    state = read_run_state(case.paths.run_dir)
    case.family, case.trainer = run_family(state), state.processes.get("trainer")
    if not processes.send_signal(victim, signal.SIGKILL):
        raise PhaseMissed(f"the {victim.name} (pid {victim.pid}) had already exited")
    case.killed_at = time.monotonic()
    if case.frozen is not None and case.frozen.pid != victim.pid:
        processes.send_signal(case.frozen, signal.SIGCONT)
    case.frozen = None


def run_family(state: RunState) -> list[psutil.Process]:
    """The run's live processes named in ``run.json`` and all their descendants."""
    family: dict[int, psutil.Process] = {}
    for record in state.processes.values():
        if not processes.is_same_process_alive(record):
            continue
        try:
            proc = psutil.Process(record.pid)
            family.update({p.pid: p for p in [proc, *proc.children(recursive=True)]})
        except psutil.NoSuchProcess:
            continue
    return list(family.values())


# ---- the checks ----------------------------------------------------------------------------------------------
def expected_status(victim: str, phase: str) -> str:
    """``stopped`` for a kill during a stop: the user asked for the run to end, and it has (the stop's result and
    status name the last checkpoint actually listed; a supervisor that died mid-stop leaves it stopped too, see
    ``hermes_nb.runs.supervision.reconcile``); ``failed`` otherwise, naming the process killed."""
    return "stopped" if phase == "stop" else "failed"


def stop_goes_on(victim: str, phase: str) -> bool:
    """A peer killed during a stop leaves the stop to go on: the trainer still finishes its step and saves its
    final checkpoint, and the run is ``stopping`` (which is right) until it has. The bound then runs from the
    trainer's exit: a terminal status sooner would give up that checkpoint, or call stopped a run still writing.
    A trainer or supervisor killed mid-stop ends the stop: the bound runs from the kill."""
    return phase == "stop" and victim in ("api", "env")


def status_problems(victim: str, phase: str, status: RunStatus) -> list[str]:
    want = expected_status(victim, phase)
    if status.status != want:
        return [f"status {status.status}, expected {want} ({status.error})"]
    if want == "stopped":
        return []
    error = status.error or ""
    found = []
    if status.failed_process != victim:
        found.append(f"failed_process {status.failed_process}, expected {victim}")
    named = "supervisor died" if victim == "supervisor" else "SIGKILL"
    if victim not in error or named not in error:
        found.append(f"the error does not name the {victim} and {named!r}: {error.splitlines()[:1]}")
    return found


def check_status(case: Case) -> None:
    """Status read by separate calls until terminal: how long after the kill (or, when the stop goes on, after
    the trainer was last seen alive), what was read before it, and whether the terminal one is right."""
    result, seen, trainer_alive_at = case.result, set(), case.killed_at
    status = run(rl_check_status(case.run_id))
    while not status.is_terminal and time.monotonic() - case.killed_at < STATUS_WATCH_S:
        seen.add(status.status)
        if case.trainer is not None and processes.is_same_process_alive(case.trainer):
            trainer_alive_at = time.monotonic()
        time.sleep(0.02)
        status = run(rl_check_status(case.run_id))
    now, result.status = time.monotonic(), status.status
    if not status.is_terminal:
        result.problems.append(f"status still {status.status} {STATUS_WATCH_S:.0f} s after the kill")
        return
    start = case.killed_at
    if stop_goes_on(result.victim, result.phase):
        start = trainer_alive_at
        result.caught += f"; the stop went on: trainer last seen alive {start - case.killed_at:.2f} s after the kill"
        if seen - {"stopping"}:
            result.problems.append(f"while the stop went on, status read {sorted(seen)}, not only stopping")
    result.status_seconds = now - start
    if result.status_seconds > STATUS_BOUND_S:
        result.problems.append(f"terminal status after {result.status_seconds:.2f} s (bound {STATUS_BOUND_S:.0f} s)")
    result.problems += status_problems(result.victim, result.phase, status)


def check_clean(case: Case) -> None:
    """No process of the run left within ``CLEAN_TIMEOUT_S`` (those left then are named, and killed)."""
    secret = read_run_secret(case.paths.run_dir)
    left = leftovers(case, secret)
    while left and time.monotonic() - case.killed_at < CLEAN_TIMEOUT_S:
        time.sleep(0.1)
        left = leftovers(case, secret)
    if left:
        case.result.problems.append(f"processes left {CLEAN_TIMEOUT_S:.0f} s after the kill: {describe(left)}")
        return
    case.result.clean_seconds = time.monotonic() - case.killed_at


def describe(procs: list[psutil.Process]) -> list[str]:
    """Each process as "pid command line", for a message that names what was left."""
    named = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            named.append(f"{proc.pid} {' '.join(proc.cmdline())[:100]}")
    return named


def leftovers(case: Case, secret: str | None) -> list[psutil.Process]:
    """The run's processes still alive: those seen before the kill, and any holding the run's secret."""
    live = {p.pid: p for p in case.family if p.is_running() and alive(p.pid)}
    if secret:
        live.update({p.pid: p for p in holders_of(secret)})
    return list(live.values())


def holders_of(secret: str) -> list[psutil.Process]:
    """Live processes with the run's secret in their environment: the run's children and theirs (W&B's service),
    found even if started after the last look at the tree."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get(SECRET_ENV) == secret and alive(proc.pid):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def check_files(case: Case) -> None:
    paths, result = case.paths, case.result
    for path in (paths.metrics, paths.env_metrics):
        read = read_metrics_file(path)
        if read.bad_lines:
            result.problems.append(f"{path.name}: lines {read.bad_lines} do not parse")
    steps = [row.step for row in read_metrics_file(paths.metrics).rows]
    if steps != list(range(1, len(steps) + 1)):
        result.problems.append(f"metrics.jsonl: steps {steps} are not 1..N")
    index = read_checkpoint_index(paths.checkpoints_index)
    if index.bad_lines:
        result.problems.append(f"checkpoints.jsonl: lines {index.bad_lines} do not parse")
    if not index.listed:
        result.checkpoint = "none listed"
        return
    result.checkpoint = f"step {index.listed[-1].step}: " + loads(index.listed[-1], result.problems)


def loads(checkpoint: CheckpointRecord, problems: list[str]) -> str:
    from transformers import AutoModelForCausalLM

    try:
        AutoModelForCausalLM.from_pretrained(checkpoint.path)
    except Exception as exc:  # any failure to load is the finding
        problems.append(f"the last listed checkpoint {checkpoint.path} does not load: {exc}")
        return "does NOT load"
    if not (Path(checkpoint.path) / TRAINER_STATE_FILE).is_file():
        problems.append(f"the last listed checkpoint {checkpoint.path} has no {TRAINER_STATE_FILE}")
        return "loads, no trainer state"
    return "loads"


def check_stop_call(case: Case) -> None:
    """In the stop phase: ``rl_stop_training`` returned, with the status read and the last listed checkpoint."""
    if case.stop_thread is None:
        return
    case.stop_thread.join(CLEAN_TIMEOUT_S)
    if "error" in case.stop_outcome or "result" not in case.stop_outcome:
        case.result.problems.append(f"rl_stop_training did not return a result: {case.stop_outcome.get('error')}")
        return
    stopped = case.stop_outcome["result"]
    listed = read_checkpoint_index(case.paths.checkpoints_index).listed
    if stopped.status != case.result.status:
        case.result.problems.append(f"rl_stop_training said {stopped.status}, status says {case.result.status}")
    if stopped.final_checkpoint != (listed[-1].path if listed else None):
        case.result.problems.append(f"rl_stop_training named {stopped.final_checkpoint}, not the last listed")


def check_resume(case: Case) -> None:
    listed = read_checkpoint_index(case.paths.checkpoints_index).listed
    if not listed:
        check_resume_refused(case)
        return
    last = listed[-1]
    resumed = run(rl_start_training(total_steps=last.step + 2, **{"trainer.resume_from": case.run_id}))
    try:
        config = RunConfig.load(Path(resumed.run_dir) / "config.yaml")
        if (config.infra.resume_checkpoint, config.infra.start_step) != (last.path, last.step):
            case.result.problems.append(f"resumed from {config.infra.resume_checkpoint}, not {last.path}")
        status = wait_for_status(resumed.run_id, lambda s: s.step > last.step or s.is_terminal, PHASE_TIMEOUT_S)
        first = read_metrics_file(Path(resumed.run_dir) / "metrics.jsonl").rows[:1]
        if status.status == "failed" or [row.step for row in first] != [last.step + 1]:
            case.result.problems.append(f"the resumed run did not continue at step {last.step + 1}: {status}")
            return
        case.result.resume = f"step {last.step} -> {last.step + 1}"
    finally:
        run(rl_stop_training(resumed.run_id))


def check_resume_refused(case: Case) -> None:
    try:
        resumed = run(rl_start_training(**{"trainer.resume_from": case.run_id}))
    except TransferError as exc:
        if "no checkpoint" not in str(exc):
            case.result.problems.append(f"resume refused, but not for the missing checkpoint: {exc}")
        case.result.resume = "refused: no checkpoint"
        return
    run(rl_stop_training(resumed.run_id))
    case.result.problems.append("a run with no checkpoint listed was resumed")


# ---- the end -------------------------------------------------------------------------------------------------
def end_case(case: Case) -> None:
    """Whatever happened: the trainer continued, the run stopped, and anything of it still alive killed."""
    if case.frozen is not None:
        processes.send_signal(case.frozen, signal.SIGCONT)
    if not case.run_id:
        return
    try:
        run(rl_stop_training(case.run_id))
    except Exception as exc:  # the case's finding; the clean-up below still runs
        case.result.problems.append(f"stopping the run at the end failed: {exc}")
    if case.stop_thread is not None:
        case.stop_thread.join(CLEAN_TIMEOUT_S)
    secret = read_run_secret(case.paths.run_dir)
    for proc in leftovers(case, secret):
        with contextlib.suppress(psutil.Error):
            proc.kill()


def table(results: list[CaseResult]) -> list[str]:
    """One line per case: the case, what was caught, the status and its time, the clean-up time, the last listed
    checkpoint, the resume, and the result (the problems of a failed case follow)."""
    lines = [f"{'case':22} {'status':8} {'in s':>5} {'clean s':>7}  {'checkpoint':20} {'resume':22} result"]
    for r in results:
        status_s = f"{r.status_seconds:5.2f}" if r.status_seconds is not None else "    -"
        clean_s = f"{r.clean_seconds:7.1f}" if r.clean_seconds is not None else "      -"
        verdict = "ok" if r.passed else "FAIL"
        lines.append(f"{r.name:22} {r.status:8} {status_s} {clean_s}  {r.checkpoint:20} {r.resume:22} {verdict}")
    lines += [f"  {r.name}: caught {r.caught}" for r in results]
    lines += [f"  {r.name}: {problem}" for r in results for problem in r.problems]
    return lines
