"""Loading a checkpoint never runs code from it; a checkpoint hermes-nb saved still resumes in full."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hermes_nb.config import RunConfig
from hermes_nb.errors import TransferError
from hermes_nb.protocol.run_layout import TRAINER_STATE_FILE
from hermes_nb.testing import make_tiny_model
from hermes_nb.trainer.checkpoints import load_checkpoint, save_checkpoint
from hermes_nb.trainer.local_backend import LocalBackend
from hermes_nb.trainer.types import AdamParams, Datum

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


def _trained_backend(model_dir: Path) -> LocalBackend:
    backend = LocalBackend(model_dir)
    datum = Datum(
        input_tokens_T=[5, 6, 7],
        target_tokens_T=[6, 7, 8],
        weights_T=[0, 1, 1],
        sampling_logprobs_T=[0.0, -4.0, -4.0],
        advantages_T=[1.0, 1.0, 1.0],
    )
    backend.forward_backward([datum], "importance_sampling")
    backend.optim_step(AdamParams(learning_rate=1e-2))
    return backend


def test_a_checkpoint_that_would_run_code_is_refused_without_running_it(model_dir: Path, tmp_path: Path) -> None:
    record = save_checkpoint(_trained_backend(model_dir), RunConfig(), tmp_path, 3, "interval")
    state_file = Path(record.path) / TRAINER_STATE_FILE
    marker = tmp_path / "code_ran"
    torch.save({"step": 3, "optimizer": None, "note": RunsCodeWhenUnpickled(marker)}, state_file)

    with pytest.raises(TransferError, match=f"infra.resume_checkpoint: {state_file}.*exec"):
        load_checkpoint(LocalBackend(model_dir), Path(record.path))

    assert not marker.exists()


def test_a_saved_checkpoint_resumes_with_its_optimizer_state(model_dir: Path, tmp_path: Path) -> None:
    backend = _trained_backend(model_dir)
    record = save_checkpoint(backend, RunConfig(), tmp_path, 4, "interval")
    resumed = LocalBackend(model_dir)

    assert load_checkpoint(resumed, Path(record.path)) == 4

    saved, loaded = backend._optimizer, resumed._optimizer
    assert saved is not None and loaded is not None
    saved_moments = [s["exp_avg_sq"] for s in saved.state_dict()["state"].values()]
    loaded_moments = [s["exp_avg_sq"] for s in loaded.state_dict()["state"].values()]
    assert len(loaded_moments) == len(saved_moments) > 0
    assert all(torch.equal(a, b) for a, b in zip(saved_moments, loaded_moments, strict=True))
