"""A full disk fails a write with its cause named and leaves every file as it was, on a real (tmpfs) filesystem.

The checkpoint, metrics, trajectory and run.json writers each hit a real ENOSPC; a file size limit
(``RLIMIT_FSIZE``, EFBIG) is reported the same way. The whole run (trainer, supervisor, resume) is in
``tests/e2e/test_disk_full_run.py``.
"""

from __future__ import annotations

import errno
import gc
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError
from safetensors.torch import save_file
from small_disk import fill, resize, small_disk
from trained_backend import trained_backend

from hermes_nb.config import RunConfig
from hermes_nb.metrics.logger import MetricsLogger
from hermes_nb.metrics.reader import read_metrics_file
from hermes_nb.protocol.checkpoints import read_checkpoint_index, read_checkpoints
from hermes_nb.protocol.recorded_batches import read_trajectories, trajectories_tail
from hermes_nb.protocol.run_files import CHECKPOINTS_FILE, DISK_RESERVE_FILE, TRAJECTORIES_FILE
from hermes_nb.protocol.run_state import RunState, read_run_state
from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.runs.supervision.state_file import write_run_state
from hermes_nb.system.disk import DiskFullError, append_record, disk_full_errno, free_bytes
from hermes_nb.testing import make_tiny_model
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.run.checkpoints import load_checkpoint, record_batch, save_checkpoint

torch.set_num_threads(1)

# The tiny model's checkpoint takes ~312 KB (weights ~90 KB, optimizer state ~200 KB): one fits in 512 KB, two
# do not.
ONE_CHECKPOINT_DISK = "512k"
# A row whose line spans a page boundary on a full tmpfs: the part in the file's last page is written, the
# rest is refused, which is the half line the writer must cut back.
WIDE_ROW = {f"train/key_{i:03d}": 0.5 for i in range(40)}


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk(tmp_path / "disk", "1m") as where:
        yield where


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


def test_a_checkpoint_that_does_not_fit_leaves_the_previous_one_listed_and_loadable(
    model_dir: Path, tmp_path: Path
) -> None:
    backend = trained_backend(model_dir)
    with small_disk(tmp_path / "run", ONE_CHECKPOINT_DISK) as run_dir:
        first = save_checkpoint(backend, RunConfig(), run_dir, 1, "interval")
        free_before = free_bytes(run_dir)
        with pytest.raises(DiskFullError) as caught:
            save_checkpoint(backend, RunConfig(), run_dir, 2, "interval")

        assert str(caught.value) == f"disk full (ENOSPC) while writing checkpoint {run_dir / 'checkpoints' / 'step_2'}"
        assert read_checkpoints(run_dir / CHECKPOINTS_FILE) == [first]
        assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_1"]  # the partial one is gone
        assert free_bytes(run_dir) == free_before  # and the space it had taken is free again
        assert load_checkpoint(LocalBackend(model_dir), Path(first.path)) == 1

        resize(run_dir, "2m")  # space is back: the next checkpoint is written and listed after the first
        save_checkpoint(backend, RunConfig(), run_dir, 2, "interval")
        assert [r.step for r in read_checkpoints(run_dir / CHECKPOINTS_FILE)] == [1, 2]


def test_a_metrics_row_that_does_not_fit_is_cut_back_and_the_file_continues_once_space_is_back(disk: Path) -> None:
    path = disk / "metrics.jsonl"
    with MetricsLogger(path) as metrics:
        step = 0
        while not _next_line_crosses_a_page(path, len(json.dumps(WIDE_ROW))):
            step += 1
            metrics.log(step, WIDE_ROW)
        size = path.stat().st_size
        filler = fill(disk)
        with pytest.raises(DiskFullError, match=rf"^disk full \(ENOSPC\) while writing {path}$"):
            metrics.log(step + 1, WIDE_ROW)
        assert path.stat().st_size == size  # the part that fitted in the last page was cut off again
        assert [r.step for r in read_metrics_file(path).rows] == list(range(1, step + 1))

        filler.unlink()
        metrics.log(step + 1, WIDE_ROW)
    read = read_metrics_file(path)
    assert ([r.step for r in read.rows], read.bad_lines, read.partial_bytes) == (list(range(1, step + 2)), [], 0)


def _next_line_crosses_a_page(path: Path, length: int) -> bool:
    """Whether a line of ``length`` appended to ``path`` would start in its last page and end in a new one."""
    size = path.stat().st_size if path.exists() else 0
    return size % 4096 != 0 and size % 4096 + length > 4096


def test_a_batch_that_does_not_fit_leaves_the_trajectories_whole_and_appendable(disk: Path) -> None:
    group = ScoredDataGroup(tokens=[list(range(300))], masks=[list(range(300))], scores=[1.0])
    record_batch(disk, 1, [group])
    filler = fill(disk)
    with pytest.raises(DiskFullError, match=r"disk full \(ENOSPC\) while writing .*trajectories.jsonl.gz"):
        for step in range(2, 50):  # until a member no longer fits in the file's last page
            record_batch(disk, step, [group])
    assert trajectories_tail(disk / TRAJECTORIES_FILE) == "whole"
    recorded = [step for step, _ in read_trajectories(disk / TRAJECTORIES_FILE)]

    filler.unlink()
    record_batch(disk, recorded[-1] + 1, [group])
    assert [step for step, _ in read_trajectories(disk / TRAJECTORIES_FILE)] == [*recorded, recorded[-1] + 1]


def test_a_run_json_write_on_a_full_disk_frees_the_run_reserve_to_record_the_failure(disk: Path) -> None:
    state = RunState(run_id="20260101-000000-aaaaaaaaaa", environment="arithmetic", status="running", total_steps=5)
    write_run_state(disk, state)
    assert (disk / DISK_RESERVE_FILE).is_file()  # kept while the run is live
    fill(disk)

    write_run_state(disk, state.model_copy(update={"status": "failed", "error": "disk full (ENOSPC) ..."}))
    assert read_run_state(disk).status == "failed"
    assert not (disk / DISK_RESERVE_FILE).exists()


def test_a_run_json_write_with_no_reserve_left_raises_and_keeps_the_old_one(disk: Path) -> None:
    state = RunState(run_id="20260101-000000-aaaaaaaaaa", environment="arithmetic", status="running", total_steps=5)
    write_run_state(disk, state)
    (disk / DISK_RESERVE_FILE).unlink()
    fill(disk)
    with pytest.raises(DiskFullError, match="run.json"):
        write_run_state(disk, state.model_copy(update={"status": "failed"}))
    assert read_run_state(disk) == state


def _python_write(directory: Path) -> None:
    (directory / "x.txt").write_text("x" * 100_000)


def _torch_save(directory: Path) -> None:
    torch.save(torch.zeros(50_000), directory / "x.pt")  # says "unexpected pos ...", no errno


def _safetensors_save(directory: Path) -> None:
    save_file({"a": torch.zeros(50_000)}, str(directory / "x.safetensors"))  # says "(os error 28)"


@pytest.mark.parametrize("write", [_python_write, _torch_save, _safetensors_save])
def test_each_writer_s_way_of_reporting_a_full_disk_is_recognised(disk: Path, write: Callable[[Path], None]) -> None:
    fill(disk)
    with pytest.raises((OSError, RuntimeError, SafetensorError)) as caught:
        write(disk)
    code = disk_full_errno(caught.value, disk)
    del caught  # torch's failed writer keeps its file open (the disk busy) for as long as the exception lives
    gc.collect()
    assert code == errno.ENOSPC


def test_a_failure_with_room_to_spare_is_not_taken_for_a_full_disk(disk: Path) -> None:
    assert disk_full_errno(RuntimeError("unexpected pos 576 vs 534"), disk) is None


def test_a_torn_line_left_by_a_killed_writer_is_cut_before_the_next_row(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    with MetricsLogger(path) as metrics:
        metrics.log(1, {"a": 1.0})
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"step": 2, "time": 1.0, "val')  # what kill -9 in the middle of a write leaves
    with MetricsLogger(path) as metrics:
        metrics.log(2, {"a": 2.0})
    read = read_metrics_file(path)
    assert ([r.step for r in read.rows], read.bad_lines, read.partial_bytes) == ([1, 2], [], 0)


# Runs in a child so that the limit binds only it. Python ignores SIGXFSZ, so the write fails with EFBIG.
FILE_SIZE_LIMIT_CHILD = """
import json, resource, sys
from hermes_nb.metrics.logger import MetricsLogger
from hermes_nb.system.disk import DiskFullError
resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))
with MetricsLogger(sys.argv[1]) as metrics:
    try:
        for step in range(1, 1000):
            metrics.log(step, {"train/loss": 0.5, "train/reward_mean": 0.25})
    except DiskFullError as exc:
        print(json.dumps({"error": str(exc), "errno": exc.errno}))
"""


def test_a_file_size_limit_is_reported_like_a_full_disk_and_leaves_no_half_row(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    out = subprocess.run(
        [sys.executable, "-c", FILE_SIZE_LIMIT_CHILD, str(path)], capture_output=True, text=True, timeout=60, check=True
    )
    result = json.loads(out.stdout)
    assert result == {"error": f"disk full (EFBIG: file size limit) while writing {path}", "errno": errno.EFBIG}
    read = read_metrics_file(path)
    assert read.rows and (read.bad_lines, read.partial_bytes) == ([], 0)
    assert path.stat().st_size <= 2000


def test_the_checkpoint_index_keeps_only_whole_lines_when_its_append_fails(disk: Path) -> None:
    index = disk / CHECKPOINTS_FILE
    line = {"step": 1, "path": str(disk), "time": 1.0, "kind": "interval", "metrics": {"k": 1.0}}
    long_line = json.dumps({**line, "step": 2, "metrics": {f"m{i}": 1.0 for i in range(40)}}) + "\n"
    while not _next_line_crosses_a_page(index, len(long_line)):
        append_record(index, (json.dumps(line) + "\n").encode())
    fill(disk)
    with pytest.raises(DiskFullError, match="checkpoints.jsonl"):
        append_record(index, long_line.encode())
    read = read_checkpoint_index(index)
    assert ([r.step for r in read.listed], read.bad_lines, read.partial_tail) == ([1], [], False)
