"""A real run whose home is a small real filesystem (tmpfs): the first checkpoint fits, the next does not.

The run fails naming the full disk; the checkpoint before stays listed and whole, the record files stay readable
to their last line, and once the filesystem is given more room a resume from that checkpoint completes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from run_helpers import QUICK_TEST_CONFIG, run, wait_for_status
from small_disk import resize, small_disk

from hermes_nb.api import (
    rl_load_config,
    rl_select_environment,
    rl_start_training,
    rl_stop_training,
)
from hermes_nb.config import RunConfig
from hermes_nb.metrics.reader import read_metrics_file
from hermes_nb.protocol.checkpoints import read_checkpoint_index
from hermes_nb.runs.run_dirs import known_run_ids
from hermes_nb.system.home import run_paths

pytestmark = [pytest.mark.e2e]

# A checkpoint of the shipped model is ~10.4 MB (weights 3.4 MB, Adam's two moments 6.9 MB). In 16 MB one fits
# beside the run's logs, metrics and config, and a second does not.
DISK = "16m"
ROOMY_DISK = "64m"
TIMEOUT = 180.0


@pytest.fixture
def small_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """HERMES_NB_HOME on its own 16 MB filesystem, with the quick-test arithmetic environment selected."""
    with small_disk(tmp_path / "home", DISK) as home:
        monkeypatch.setenv("HERMES_NB_HOME", str(home))
        try:
            run(rl_select_environment("arithmetic"))
            run(rl_load_config(QUICK_TEST_CONFIG))
            yield home
        finally:
            for run_id in known_run_ids():
                run(rl_stop_training(run_id))


@pytest.mark.timeout(2 * TIMEOUT + 60)  # two run waits in full, above pytest-timeout's 300 s default
def test_a_full_disk_fails_the_run_naming_it_and_a_resume_once_space_is_back_completes(small_home: Path) -> None:
    # W&B off: its offline files would take a share of the small disk that varies from run to run.
    settings = {"trainer.save_checkpoint_interval": 2, "wandb.mode": "disabled", "steps_per_eval": 0}
    first = run(rl_start_training(total_steps=50, **settings))
    failed = wait_for_status(first.run_id, lambda s: s.is_terminal, TIMEOUT)

    assert failed.status == "failed", failed
    paths = run_paths(first.run_id)
    step_2, step_4 = paths.checkpoints_dir / "step_2", paths.checkpoints_dir / "step_4"
    assert failed.error is not None
    assert re.search(rf"disk full \(ENOSPC\) while writing checkpoint {re.escape(str(step_4))}", failed.error)
    assert [c.path for c in failed.checkpoints] == [str(step_2)]
    assert sorted(p.name for p in paths.checkpoints_dir.iterdir()) == ["step_2"]  # no half checkpoint left
    for metrics_file in (paths.metrics, paths.env_metrics):
        read = read_metrics_file(metrics_file)
        assert read.rows and (read.bad_lines, read.partial_bytes) == ([], 0), metrics_file
    index = read_checkpoint_index(paths.checkpoints_index)
    assert (index.bad_lines, index.partial_tail) == ([], False)
    assert failed.damaged == []

    resize(small_home, ROOMY_DISK)
    resumed = run(rl_start_training(resume_from=first.run_id, total_steps=6))
    done = wait_for_status(resumed.run_id, lambda s: s.is_terminal, TIMEOUT)

    assert done.status == "completed", done.error
    infra = RunConfig.load(Path(resumed.run_dir) / "config.yaml").infra
    assert (infra.resume_checkpoint, infra.start_step) == (str(step_2), 2)
    assert [c.step for c in done.checkpoints][-1] == 6
