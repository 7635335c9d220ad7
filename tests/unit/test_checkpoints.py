"""Checkpoints are complete, loadable and listed; the trajectory record survives a torn tail."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from trained_backend import trained_backend

from hermes_nb.config import RunConfig
from hermes_nb.protocol.checkpoints import read_checkpoints
from hermes_nb.protocol.recorded_batches import read_trajectories
from hermes_nb.protocol.run_files import CHECKPOINTS_FILE, TRAJECTORIES_FILE
from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.testing import make_tiny_model
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.run.checkpoints import load_checkpoint, record_batch, save_checkpoint

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


def test_checkpoint_holds_model_tokenizer_state_and_config(model_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    backend = trained_backend(model_dir)
    config = RunConfig(env={"total_steps": 3})
    record = save_checkpoint(backend, config, tmp_path, 3, "final", {"train/loss": 0.5})
    path = Path(record.path)
    assert path == tmp_path / "checkpoints" / "step_3"
    loaded = AutoModelForCausalLM.from_pretrained(str(path))
    for a, b in zip(backend.model.parameters(), loaded.parameters(), strict=True):
        assert torch.equal(a, b)
    assert AutoTokenizer.from_pretrained(str(path)).encode("12") == backend.tokenizer.encode("12")
    state = torch.load(path / "trainer_state.pt", weights_only=False)
    assert state["step"] == 3 and state["optimizer"]["state"] and "torch" in state["rng"]
    assert RunConfig.load(path / "config.yaml").env == {"total_steps": 3}
    listed = read_checkpoints(tmp_path / CHECKPOINTS_FILE)
    assert [(r.step, r.kind, r.metrics) for r in listed] == [(3, "final", {"train/loss": 0.5})]
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".tmp")]


def test_load_checkpoint_restores_step_and_rng(model_dir: Path, tmp_path: Path) -> None:
    backend = trained_backend(model_dir)
    record = save_checkpoint(backend, RunConfig(), tmp_path, 5, "interval")
    expected = torch.rand(3)
    assert load_checkpoint(LocalBackend(model_dir), Path(record.path)) == 5
    assert torch.equal(torch.rand(3), expected)


def test_a_checkpoint_saved_with_a_diverged_loss_is_still_listed(model_dir: Path, tmp_path: Path) -> None:
    save_checkpoint(trained_backend(model_dir), RunConfig(), tmp_path, 2, "interval", {"train/loss": math.nan})
    assert [(r.step, r.metrics) for r in read_checkpoints(tmp_path / CHECKPOINTS_FILE)] == [(2, {})]


def test_a_torn_checkpoints_line_is_skipped(tmp_path: Path) -> None:
    line = {"step": 1, "path": str(tmp_path), "time": 1.0, "kind": "interval", "metrics": {}}
    (tmp_path / CHECKPOINTS_FILE).write_text(json.dumps(line) + "\n" + '{"step": 2, "pa')
    assert [r.step for r in read_checkpoints(tmp_path / CHECKPOINTS_FILE)] == [1]


def test_trajectories_are_read_back_and_a_truncated_tail_is_ignored(tmp_path: Path) -> None:
    group = ScoredDataGroup(tokens=[[1, 2, 3]], masks=[[-100, 2, 3]], scores=[1.0])
    for step in (1, 2, 3):
        record_batch(tmp_path, step, [group])
    path = tmp_path / TRAJECTORIES_FILE
    assert [step for step, _ in read_trajectories(path)] == [1, 2, 3]
    # Recorded as trained: with the per-token advantages (a single member has no signal: zero everywhere).
    assert next(iter(read_trajectories(path)))[1] == [group.model_copy(update={"advantages": [[0.0, 0.0, 0.0]]})]
    path.write_bytes(path.read_bytes()[:-7])  # a crash in the middle of writing step 3
    assert [step for step, _ in read_trajectories(path)] == [1, 2]
