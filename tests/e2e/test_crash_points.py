"""``kill -9`` of each process of a run, each at one phase of the run's life (issue #15, item 6): the status is
right within 2 s, nothing of the run is left, the files parse, the last listed checkpoint loads and the run
resumes from it. A sample of the matrix: one case per victim, the phases rotated so that each is covered once
(``bench/crash_points.py`` runs all 16; ``crash_points.py`` says how each phase is caught and what is checked).
"""

from __future__ import annotations

import pytest
from crash_points import CLEAN_TIMEOUT_S, PHASE_TIMEOUT_S, PHASES, STATUS_WATCH_S, VICTIMS, run_case, table

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("quick_env")]

# Fixed, so a failure names a case that can be run again (bench/crash_points.py --cases trainer@checkpoint).
# The trainer mid-checkpoint is the case a crash-safe checkpoint exists for; the supervisor mid-stop leaves the
# run to its readers (reconcile), the API in steady state leaves the environment retrying a vanished API.
SAMPLE = [("supervisor", "stop"), ("api", "steady"), ("trainer", "checkpoint"), ("env", "startup")]


def test_the_sample_has_one_case_per_victim_and_covers_every_phase() -> None:
    assert sorted(v for v, _ in SAMPLE) == sorted(VICTIMS)
    assert sorted(p for _, p in SAMPLE) == sorted(PHASES)


# A case's named waits in full: reaching its phase (a checkpoint phase waits twice), the status watch, the joins of
# the stop call and the case's end, the resume. Above pytest-timeout's 300 s default, so a case that hangs is
# reported with its table (what was reached, what was found), not by pytest-timeout.
CASE_TIMEOUT_S = 3 * PHASE_TIMEOUT_S + STATUS_WATCH_S + 3 * CLEAN_TIMEOUT_S + 60


@pytest.mark.timeout(CASE_TIMEOUT_S)
@pytest.mark.parametrize(("victim", "phase"), SAMPLE, ids=[f"{v}@{p}" for v, p in SAMPLE])
def test_a_kill_9_leaves_a_right_status_no_process_readable_files_and_a_resumable_run(victim: str, phase: str) -> None:
    result = run_case(victim, phase)

    assert result.passed, "\n".join(table([result]))
