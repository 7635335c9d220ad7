"""Warm starts on real processes. A kernel holding two kits (the default): its selection makes them one after the
other, its first run starts in the first and trains beside no kit's imports, the run's end makes the next, and a
start right after a stop takes the spare. A kernel holding one: a selection makes a kit and the kernel's first run
starts in it; a start that finds the kit still importing waits for it and is warm (the first right after a
selection, one right after a stop); the next run from one kernel starts in the processes its warm kit made ahead,
completes as a cold run does, and leaves nothing behind; a kill -9 of its trainer fails it naming the trainer (and
its supervisor is found without run.json); a kernel whose environment changed starts cold and ends the stale kit;
a kit ends with its kernel and after its idle timeout. (The rest of the suite starts every run cold:
tests/conftest.py.)"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from run_helpers import QUICK_TEST_CONFIG, REPO_ROOT, alive_after, finite, run, run_pids, wait_for_status

from hermes_nb.api import (
    rl_check_status,
    rl_load_config,
    rl_select_environment,
    rl_start_training,
    rl_stop_training,
)
from hermes_nb.protocol.run_state import read_run_state
from hermes_nb.runs.supervision import warm_start
from hermes_nb.runs.supervision.damage import live_supervisor
from hermes_nb.runs.supervision.warm_kit import IDLE_TIMEOUT_VAR, READY_LINE, STARTED_LINE
from hermes_nb.system import home

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("quick_env")]

RUN_TIMEOUT_S = 180.0
READY_TIMEOUT_S = 120.0
# A released or orphaned warm process exits at once; the margin is for a loaded machine.
GONE_WITHIN_S = 20.0
SHORT = {"total_steps": 2}
RUN_PROCESSES = ("supervisor", "api", "trainer", "env")
# From the call to the first trainer step: 3x the targets measured on a quiet machine (1.5 s for a kernel's first run,
# 2 s for a start right after a stop; bench/startup.py), for a loaded one. A cold start takes 4-10 s.
FIRST_RUN_FIRST_STEP_S = 4.5
BACK_TO_BACK_FIRST_STEP_S = 6.0


@pytest.fixture(autouse=True)
def warm_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Warm starts on, with one kit held: the two-kit tests say so."""
    monkeypatch.setenv(warm_start.WARM_START_VAR, "1")
    monkeypatch.setenv(warm_start.KITS_VAR, "1")
    yield
    warm_start.discard()


def kit_log_lines() -> list[str]:
    path = home.logs_dir() / "warm_kit.log"
    return path.read_text(encoding="utf-8").splitlines() if path.is_file() else []


def kit_pids(said: str = READY_LINE) -> list[int]:
    """The newest warm kit's pid and its warm processes', from its log's ready line (or the line it started on)."""
    lines = kit_log_lines()
    ready = [line for line in lines if line.startswith(said)]
    assert ready, f"no warm kit said {said!r}:\n{lines[-10:]}"
    return [int(pid) for pid in re.findall(r"\d+", ready[-1])]


def kits_started() -> list[list[int]]:
    """Each kit this home had, in order: its pid and its warm processes', from the line it started on."""
    return [[int(pid) for pid in re.findall(r"\d+", line)] for line in kit_log_lines() if line.startswith(STARTED_LINE)]


def wait_for_kit_started(before: int) -> list[int]:
    """The pids of the kit started after the first ``before`` (a thread of the kernel makes it)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while len(kits := kits_started()) <= before:
        assert time.monotonic() < deadline, f"no warm kit started:\n{kit_log_lines()[-10:]}"
        time.sleep(0.1)
    return kits[before]


def completed_run(**overrides: object) -> str:
    start = run(rl_start_training(**{**SHORT, **overrides}))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, RUN_TIMEOUT_S)
    assert status.status == "completed", f"{status.error}\n" + "\n".join(status.log_tail)
    return start.run_id


def run_process_pids(run_id: str) -> set[int]:
    """The run's processes by pid (a process's start time is read to ~1 s, too coarse to order it by)."""
    records = read_run_state(home.run_dir(run_id)).processes
    return {records[name].pid for name in RUN_PROCESSES}


def seconds_to_first_step(run_id: str, called: float) -> float:
    """From ``called`` (``time.time()`` before the start) to the run's first metrics row."""
    first_row = home.run_paths(run_id).metrics.read_text(encoding="utf-8").splitlines()[0]
    return float(json.loads(first_row)["time"]) - called


def supervisor_log(run_id: str) -> str:
    return home.run_paths(run_id).logs["supervisor"].read_text(encoding="utf-8")


def select_in_a_fresh_home(monkeypatch: pytest.MonkeyPatch, home_dir: Path) -> None:
    """A kernel's selection in a home of its own, whose kit log holds only the kits made from here on."""
    warm_start.discard()
    monkeypatch.setenv("HERMES_NB_HOME", str(home_dir))
    run(rl_select_environment("arithmetic"))
    run(rl_load_config(QUICK_TEST_CONFIG))


def two_kits_after_a_selection(monkeypatch: pytest.MonkeyPatch, home_dir: Path) -> tuple[list[int], list[int]]:
    """A selection in a fresh home of a kernel holding two kits: the first kit's pids and the spare's, the spare
    started once the first had imported."""
    monkeypatch.setenv(warm_start.KITS_VAR, "2")
    select_in_a_fresh_home(monkeypatch, home_dir)
    first, spare = wait_for_kit_started(0), wait_for_kit_started(1)
    lines = kit_log_lines()
    first_ready = next(i for i, line in enumerate(lines) if line.startswith(READY_LINE) and str(first[0]) in line)
    spare_started = next(i for i, line in enumerate(lines) if line.startswith(STARTED_LINE) and str(spare[0]) in line)
    assert first_ready < spare_started, lines
    return first, spare


def test_with_two_kits_the_first_run_trains_beside_no_kits_imports_and_its_end_makes_the_next(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    first, spare = two_kits_after_a_selection(monkeypatch, tmp_path)

    called = time.time()
    start = run(rl_start_training(total_steps=20))
    while not (status := run(rl_check_status(start.run_id))).is_terminal:
        assert len(kits_started()) == 2, "a kit was made while the run trained"
        time.sleep(0.1)

    assert status.status == "completed", status.error
    assert run_process_pids(start.run_id) == set(first)
    assert seconds_to_first_step(start.run_id, called) <= FIRST_RUN_FIRST_STEP_S
    replacement = wait_for_kit_started(2)
    assert not set(replacement) & set(first + spare)


def test_with_two_kits_a_start_right_after_a_stop_takes_the_spare(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    first, spare = two_kits_after_a_selection(monkeypatch, tmp_path)
    start = run(rl_start_training(total_steps=500))
    wait_for_status(start.run_id, lambda s: s.step >= 1 or s.is_terminal, RUN_TIMEOUT_S)
    run(rl_stop_training(start.run_id))

    called = time.time()
    second = completed_run()  # at once

    assert run_process_pids(start.run_id) == set(first)
    assert run_process_pids(second) == set(spare), kit_log_lines()[-10:]
    assert supervisor_log(second).count("warm process became") == 3
    assert seconds_to_first_step(second, called) <= BACK_TO_BACK_FIRST_STEP_S


def test_a_selection_makes_a_kit_and_the_first_run_starts_in_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    select_in_a_fresh_home(monkeypatch, tmp_path)
    assert warm_start.wait_until_ready(READY_TIMEOUT_S)
    kit = kit_pids()

    first = completed_run()

    assert run_process_pids(first) == set(kit)
    assert supervisor_log(first).count("warm process became") == 3


def test_a_first_start_while_the_kit_imports_waits_for_it_and_is_warm(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    select_in_a_fresh_home(monkeypatch, tmp_path)
    kit = wait_for_kit_started(0)

    first = completed_run()  # at once: its imports take seconds

    assert run_process_pids(first) == set(kit), kit_log_lines()[-10:]
    assert supervisor_log(first).count("warm process became") == 3
    assert any("handed a run while" in line for line in kit_log_lines())


def test_a_start_right_after_a_stop_waits_for_the_kit_the_stopped_run_left(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    select_in_a_fresh_home(monkeypatch, tmp_path)
    start = run(rl_start_training(total_steps=500))
    wait_for_status(start.run_id, lambda s: s.step >= 1 or s.is_terminal, RUN_TIMEOUT_S)
    kit = wait_for_kit_started(1)  # after the selection's kit (this run's): the one its first step made
    run(rl_stop_training(start.run_id))

    second = completed_run()  # at once

    assert run_process_pids(second) == set(kit), kit_log_lines()[-10:]
    assert supervisor_log(second).count("warm process became") == 3


def test_the_next_run_starts_in_the_warm_processes_completes_and_leaves_nothing_behind() -> None:
    completed_run()
    assert warm_start.wait_until_ready(READY_TIMEOUT_S)
    kit = kit_pids()

    second = completed_run()

    assert run_process_pids(second) == set(kit)  # the kit's processes, started before the call
    assert supervisor_log(second).count("warm process became") == 3
    status = run(rl_check_status(second))
    assert finite(status.metrics.reward_mean) and finite(status.metrics.loss), status.metrics
    assert alive_after(kit, GONE_WITHIN_S) == []
    # The second run left a kit of its own; ending it ends its processes.
    assert warm_start.wait_until_ready(READY_TIMEOUT_S)
    next_kit = kit_pids()
    warm_start.discard()
    assert alive_after(next_kit, GONE_WITHIN_S) == []


def test_a_kill_of_a_warm_trainer_fails_the_run_naming_it_with_nothing_left() -> None:
    completed_run()
    assert warm_start.wait_until_ready(READY_TIMEOUT_S)
    kit = kit_pids()
    start = run(rl_start_training(total_steps=500))
    wait_for_status(start.run_id, lambda s: s.step >= 1 or s.is_terminal, RUN_TIMEOUT_S)
    pids = run_pids(start.run_id)
    assert pids["trainer"] in kit
    # A reader that cannot read run.json still finds the run's supervisor, a warm kit's command line or not.
    found = live_supervisor(home.run_paths(start.run_id))
    assert found is not None and found.pid == pids["supervisor"]

    os.kill(pids["trainer"], signal.SIGKILL)

    status = wait_for_status(start.run_id, lambda s: s.is_terminal, RUN_TIMEOUT_S)
    assert (status.status, status.failed_process) == ("failed", "trainer")
    assert status.error is not None and "SIGKILL" in status.error
    assert alive_after(list(pids.values()), GONE_WITHIN_S) == []
    run(rl_stop_training(start.run_id))


def test_a_kernel_whose_environment_changed_starts_cold_and_ends_the_stale_kit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    completed_run()
    assert warm_start.wait_until_ready(READY_TIMEOUT_S)
    stale = kit_pids()
    monkeypatch.setenv("HERMES_NB_TEST_CHANGED", "a value the warm processes never saw")

    second = completed_run()

    assert not run_process_pids(second) & set(stale)
    assert "warm process became" not in supervisor_log(second)
    assert alive_after(stale, GONE_WITHIN_S) == []


KERNEL = """
import asyncio, sys, time
from hermes_nb.api import rl_check_status, rl_load_config, rl_select_environment, rl_start_training
from hermes_nb.runs.supervision import warm_start
from hermes_nb.runs.supervision.damage import live_supervisor
asyncio.run(rl_select_environment("arithmetic"))
asyncio.run(rl_load_config(sys.argv[1]))
run_id = asyncio.run(rl_start_training(total_steps=2)).run_id
while not asyncio.run(rl_check_status(run_id)).is_terminal:
    time.sleep(0.2)
assert warm_start.wait_until_ready(120)
"""


def test_a_warm_kit_ends_with_the_kernel_that_made_it() -> None:
    config = REPO_ROOT / "configs" / "quick_test.yaml"
    subprocess.run([sys.executable, "-c", KERNEL, str(config)], check=True, timeout=RUN_TIMEOUT_S, cwd=REPO_ROOT)
    assert alive_after(kit_pids(), GONE_WITHIN_S) == []


def test_a_warm_kit_ends_after_its_idle_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(IDLE_TIMEOUT_VAR, "1")
    completed_run()
    assert warm_start.wait_until_ready(READY_TIMEOUT_S)
    assert alive_after(kit_pids(), GONE_WITHIN_S) == []
    cold = completed_run()  # and the next is cold
    assert "warm process became" not in supervisor_log(cold)
