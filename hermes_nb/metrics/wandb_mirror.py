"""The W&B mirror: a child process that owns one W&B run and logs the rows its parent sends it.

W&B is a mirror of the JSONL files, never on the training path. Importing ``wandb`` and ``wandb.init`` cost about
a second of CPU per process, and every ``run.log`` some Python work; on a background *thread* of the trainer or
the environment process that work holds their GIL during the run's first, costliest steps (with W&B on a thread,
steps 1-50 of the race took 11% longer than with this mirror: ``bench/first_steps.py``, ``docs/benchmarks.md``,
"W&B off the training path"). So each ``MetricsLogger`` that mirrors to W&B starts this program
(``python -m hermes_nb.metrics.wandb_mirror``) with the parent's Python, at a lower CPU priority
(``MIRROR_NICENESS``), and feeds it on its stdin:

- the first line: the ``WandbRunSettings`` as JSON;
- then one ``MetricsRow`` per line, in order;
- end of input (the parent closed the pipe, or died): finish the W&B run and exit.

The child ignores SIGINT and SIGTERM: a run's process group is signalled as a whole, and the child must outlive
its parent's last rows to finish the W&B run; its parent's end of the pipe is what stops it. A failure (W&B cannot
start, a log call raises) is one warning on stderr, which is the parent's log; the rows that follow are read and
dropped, and the exit status is ``FAILED_EXIT``, which the parent reads as ``wandb_failed``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from typing import IO, Any

from hermes_nb.metrics.wandb_settings import WandbRunSettings, wandb_info_path
from hermes_nb.protocol.metrics import WANDB_STEP_KEY, MetricsRow

logger = logging.getLogger("hermes_nb.metrics.wandb_mirror")

# How much lower than its parent the mirror runs (nice(2) steps): the scheduler gives it what the run's own
# processes leave, so it catches up when they wait instead of slowing their steps.
MIRROR_NICENESS = 10
FAILED_EXIT = 3


class Mirror:
    """One W&B run fed row by row; the first failure is reported once and ends the mirroring, not the reading."""

    def __init__(self, settings: WandbRunSettings) -> None:
        self.settings = settings
        self.failed = False
        self.run: Any = None

    def start(self) -> None:
        try:
            self.run = self._init()
        except Exception as exc:  # any W&B failure ends the mirroring, never the parent
            self.fail("could not start", exc)

    def log(self, row: MetricsRow) -> None:
        if self.failed:
            return
        try:
            self.run.log({**row.values, WANDB_STEP_KEY: row.step})
        except Exception as exc:
            self.fail("stopped logging", exc)

    def finish(self) -> None:
        if self.run is None:
            return
        try:
            self.run.finish()
        except Exception as exc:
            self.fail("could not finish", exc)

    def fail(self, what: str, exc: BaseException) -> None:
        if not self.failed:
            logger.warning(
                "W&B (%s, %s mode) %s: %s: %s; metrics continue in the JSONL file",
                self.settings.role, self.settings.mode, what, type(exc).__name__, exc,
            )  # fmt: skip
        self.failed = True

    def _init(self) -> Any:
        import wandb

        s = self.settings
        s.dir.mkdir(parents=True, exist_ok=True)
        run = wandb.init(
            project=s.project,
            name=s.name,
            group=s.group,
            entity=s.entity,
            config=s.config,
            mode=s.mode,
            dir=str(s.dir),
            job_type=s.role,
            # The parent's stdout is not W&B's to capture: the mirror has none worth showing.
            settings=wandb.Settings(console="off", silent=True),
        )
        # The x-axis is the trainer step carried as a value, not W&B's own step: W&B drops rows whose step goes
        # backwards, and an evaluation started at step s may finish after rows for s+1 were logged.
        run.define_metric(WANDB_STEP_KEY)
        run.define_metric("*", step_metric=WANDB_STEP_KEY)
        write_info(s, run)
        return run


def write_info(settings: WandbRunSettings, run: Any) -> None:
    """Record the run's identity atomically so that a status reader never sees half a file."""
    info = {
        "role": settings.role,
        "mode": settings.mode,
        "project": settings.project,
        "entity": getattr(run, "entity", None) or settings.entity,
        "id": getattr(run, "id", None),
        "name": getattr(run, "name", None),
        "url": getattr(run, "url", None) if settings.mode == "online" else None,
        "dir": str(getattr(run, "dir", "") or ""),
    }
    path = wandb_info_path(settings.dir, settings.role)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(info, indent=1), encoding="utf-8")
    tmp.replace(path)


def mirror(lines: IO[str]) -> int:
    """Read the settings line, then rows until the end of ``lines``; the exit status."""
    first = lines.readline()
    if not first.strip():
        return 0  # the parent went away before it said what to mirror
    m = Mirror(WandbRunSettings.model_validate_json(first))
    m.start()
    for line in lines:
        if line.strip():
            m.log(MetricsRow.model_validate_json(line))
    m.finish()
    return FAILED_EXIT if m.failed else 0


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.nice(MIRROR_NICENESS)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return mirror(sys.stdin)


if __name__ == "__main__":
    sys.exit(main())
