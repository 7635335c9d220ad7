"""``python -m hermes_nb.processes.trainer --config RUN_DIR/config.yaml``: the trainer process, with every backend
(``hermes_nb.backends.PARTS``); what it does is ``hermes_nb.trainer.run.main.run``.

Exit codes: 0 after ``total_steps`` or a clean stop (SIGTERM/SIGINT: the current step finishes, a ``stop``
checkpoint is saved, ``stopped`` is logged); 2 for a user error (one line in the log); ``DISK_FULL_EXIT`` (74)
when a checkpoint or metrics write found the disk full (one ``disk full (...) while writing ...`` line); 1 for a
crash (the traceback goes to stderr, which the supervisor redirects to ``logs/trainer_<run_id>.log``).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from hermes_nb.backends import PARTS
from hermes_nb.config import RunConfig
from hermes_nb.errors import HermesNBError
from hermes_nb.system.disk import DISK_FULL_EXIT, DiskFullError
from hermes_nb.trainer.run.main import run

# The trainer's log lines keep the name they always had, whichever module writes them.
logger = logging.getLogger("hermes_nb.trainer")


def _run_dir(config: RunConfig, config_path: Path) -> Path:
    return Path(config.infra.run_dir) if config.infra.run_dir else config_path.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__)
    parser.add_argument("--config", required=True, type=Path, help="the run's config.yaml")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # One line per /batch poll would bury the training log.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        logger.info("received %s: finishing the current step, then saving a checkpoint", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        config = RunConfig.load(args.config)
        outcome = run(config, _run_dir(config, args.config), stop, PARTS)
    except DiskFullError as exc:
        logger.error("%s", exc)
        return DISK_FULL_EXIT
    except HermesNBError as exc:
        logger.error("%s", exc)
        return 2
    except Exception:
        logger.exception("trainer crashed")
        return 1
    logger.info("trainer %s at step %d", outcome.reason, outcome.last_step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
