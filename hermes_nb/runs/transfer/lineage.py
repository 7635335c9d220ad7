"""A resumed run continues another: its curves start where the run it resumed from left off.

A resumed run has its own directory (nothing of the earlier run is rewritten: no data is lost), and
``run.json`` names the run it resumed from; its ``config.yaml`` holds the step it continued after
(``infra.start_step``). Readers that show one continuous curve prepend the earlier runs' rows up to that step.
"""

from __future__ import annotations

from hermes_nb.config import RunConfig
from hermes_nb.errors import ConfigError
from hermes_nb.metrics.reader import read_all_metrics
from hermes_nb.protocol.metrics import MetricsRow
from hermes_nb.protocol.run_state import RunStateUnreadable, read_run_state
from hermes_nb.system import home
from hermes_nb.system.home import run_paths

# A chain longer than this is a cycle in damaged files, not a real history of resumes.
MAX_CHAIN = 100


def predecessors(run_id: str) -> list[tuple[str, int]]:
    """(earlier run id, the step its successor continued after), oldest first."""
    chain: list[tuple[str, int]] = []
    current = run_id
    while len(chain) < MAX_CHAIN:
        try:
            paths = run_paths(current)
            previous = read_run_state(paths.run_dir).resumed_from
            start_step = RunConfig.load(paths.config).infra.start_step
        except (RunStateUnreadable, ConfigError):
            break
        if not previous or not home.run_dir(previous).is_dir():
            break
        chain.append((previous, start_step))
        current = previous
    return list(reversed(chain))


def predecessor_rows(run_id: str, filename: str) -> list[MetricsRow]:
    """The rows of ``filename`` from the runs ``run_id`` resumed from, each up to where its successor began."""
    rows: list[MetricsRow] = []
    for previous, start_step in predecessors(run_id):
        rows += [row for row in read_all_metrics(home.run_dir(previous) / filename) if row.step <= start_step]
    return rows
