"""Loading a checkpoint never runs code from it; a checkpoint hermes-nb saved still resumes in full."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trained_backend import trained_backend

from hermes_nb.config import RunConfig
from hermes_nb.errors import TransferError
from hermes_nb.protocol.run_files import TRAINER_STATE_FILE
from hermes_nb.testing import make_tiny_model
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.run.checkpoints import load_checkpoint, save_checkpoint

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


class RunsCodeWhenUnpickled:
    """What a hostile ``trainer_state.pt`` holds: unpickling it calls ``exec`` on a program of its choosing."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (exec, (f"import pathlib; pathlib.Path({str(self.marker)!r}).write_text('ran')",))


def test_a_checkpoint_that_would_run_code_is_refused_without_running_it(model_dir: Path, tmp_path: Path) -> None:
    record = save_checkpoint(trained_backend(model_dir), RunConfig(), tmp_path, 3, "interval")
    state_file = Path(record.path) / TRAINER_STATE_FILE
    marker = tmp_path / "code_ran"
    torch.save({"step": 3, "optimizer": None, "note": RunsCodeWhenUnpickled(marker)}, state_file)

    with pytest.raises(TransferError, match=f"infra.resume_checkpoint: {state_file}.*exec"):
        load_checkpoint(LocalBackend(model_dir), Path(record.path))

    assert not marker.exists()


def test_a_saved_checkpoint_resumes_with_its_optimizer_state(model_dir: Path, tmp_path: Path) -> None:
    backend = trained_backend(model_dir)
    record = save_checkpoint(backend, RunConfig(), tmp_path, 4, "interval")
    resumed = LocalBackend(model_dir)

    assert load_checkpoint(resumed, Path(record.path)) == 4

    saved, loaded = backend._optimizer, resumed._optimizer
    assert saved is not None and loaded is not None
    saved_moments = [s["exp_avg_sq"] for s in saved.state_dict()["state"].values()]
    loaded_moments = [s["exp_avg_sq"] for s in loaded.state_dict()["state"].values()]
    assert len(loaded_moments) == len(saved_moments) > 0
    assert all(torch.equal(a, b) for a, b in zip(saved_moments, loaded_moments, strict=True))
