"""Every unusable resume, transfer or replay input is refused before anything starts, naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes_nb.config import EnvironmentRef, RunConfig, TrainerConfig
from hermes_nb.errors import TransferError
from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.protocol.run_state import RunState
from hermes_nb.runs.supervision.state_file import write_run_state
from hermes_nb.runs.transfer.resolve import resolve_transfer
from hermes_nb.system import home
from hermes_nb.system.home import run_paths
from hermes_nb.testing import ModelShape, make_tiny_model


@pytest.fixture
def base_model(tmp_path: Path) -> Path:
    return make_tiny_model(tmp_path / "base")


def make_run(
    run_id: str,
    status: str,
    checkpoints: dict[int, Path] | None = None,
    *,
    trajectories: bool = False,
    evals: dict[int, float] | None = None,
) -> RunPaths:
    paths = run_paths(run_id)
    paths.run_dir.mkdir(parents=True)
    write_run_state(paths.run_dir, RunState(run_id=run_id, environment="arithmetic", status=status, total_steps=10))
    lines = [
        json.dumps({"step": step, "path": str(path), "time": 0.0, "kind": "interval"})
        for step, path in (checkpoints or {}).items()
    ]
    paths.checkpoints_index.write_text("".join(line + "\n" for line in lines))
    if trajectories:
        paths.trajectories.write_bytes(b"\x1f\x8b not empty")
    rows = [
        json.dumps({"step": s, "time": 0.0, "values": {"eval/percent_correct": v}}) for s, v in (evals or {}).items()
    ]
    paths.env_metrics.write_text("".join(row + "\n" for row in rows))
    return paths


def checkpoint(base_model: Path, where: Path, with_state: bool = True) -> Path:
    where.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json"):
        (where / name).write_bytes((base_model / name).read_bytes())
    if with_state:
        (where / "trainer_state.pt").write_bytes(b"state")
    return where


def config(**trainer: object) -> RunConfig:
    env = EnvironmentRef(name="arithmetic", class_name="ArithmeticEnv", file="environments/arithmetic.py")
    return RunConfig(environment=env, env={"total_steps": 10}, trainer=TrainerConfig(**trainer))


def test_resume_takes_the_last_checkpoint_with_trainer_state_and_its_step(base_model: Path, tmp_path: Path) -> None:
    make_run(
        "20260101-000000-aaaaaaaaaa",
        "stopped",
        {2: checkpoint(base_model, tmp_path / "c2"), 4: checkpoint(base_model, tmp_path / "c4")},
    )
    resolved = resolve_transfer(config(resume_from="20260101-000000-aaaaaaaaaa"), base_model)
    assert resolved.infra.resume_checkpoint == str(tmp_path / "c4")
    assert resolved.infra.start_step == 4


def test_resuming_a_running_run_is_refused(base_model: Path, tmp_path: Path) -> None:
    make_run("20260101-000000-bbbbbbbbbb", "running", {2: checkpoint(base_model, tmp_path / "c2")})
    with pytest.raises(TransferError, match=r"trainer.resume_from: .* is running; stop it first"):
        resolve_transfer(config(resume_from="20260101-000000-bbbbbbbbbb"), base_model)


def test_resuming_a_run_without_checkpoints_is_refused(base_model: Path) -> None:
    make_run("20260101-000000-cccccccccc", "failed")
    with pytest.raises(TransferError, match="no checkpoint with trainer state"):
        resolve_transfer(config(resume_from="20260101-000000-cccccccccc"), base_model)


def test_resuming_past_total_steps_asks_for_more_steps(base_model: Path, tmp_path: Path) -> None:
    make_run("20260101-000000-dddddddddd", "completed", {10: checkpoint(base_model, tmp_path / "c10")})
    with pytest.raises(TransferError, match="set total_steps above 10"):
        resolve_transfer(config(resume_from="20260101-000000-dddddddddd"), base_model)


def test_resuming_an_unknown_run_names_the_field(base_model: Path) -> None:
    with pytest.raises(TransferError, match="trainer.resume_from: .*unknown run"):
        resolve_transfer(config(resume_from="nope"), base_model)


def test_pretrained_run_id_resolves_to_its_final_checkpoint(base_model: Path, tmp_path: Path) -> None:
    make_run(
        "20260101-000000-eeeeeeeeee",
        "completed",
        {2: checkpoint(base_model, tmp_path / "c2"), 6: checkpoint(base_model, tmp_path / "c6")},
    )
    resolved = resolve_transfer(config(pretrained_model_path="20260101-000000-eeeeeeeeee"), base_model)
    assert resolved.infra.init_weights == str(tmp_path / "c6")


def test_pretrained_best_picks_the_checkpoint_with_the_best_evaluation(base_model: Path, tmp_path: Path) -> None:
    make_run(
        "20260101-000000-ffffffffff",
        "completed",
        {2: checkpoint(base_model, tmp_path / "c2"), 6: checkpoint(base_model, tmp_path / "c6")},
        evals={0: 0.1, 2: 0.8, 6: 0.5},
    )
    resolved = resolve_transfer(config(pretrained_model_path="20260101-000000-ffffffffff@best"), base_model)
    assert resolved.infra.init_weights == str(tmp_path / "c2")


def test_pretrained_path_that_is_no_model_is_refused(base_model: Path, tmp_path: Path) -> None:
    with pytest.raises(TransferError, match=r"trainer.pretrained_model_path: .*\(no config.json there\)"):
        resolve_transfer(config(pretrained_model_path=str(tmp_path / "missing")), base_model)


def test_pretrained_model_of_another_architecture_is_refused(base_model: Path, tmp_path: Path) -> None:
    other = make_tiny_model(tmp_path / "wider", ModelShape(hidden_size=48))
    with pytest.raises(TransferError, match="another architecture .*hidden_size 48"):
        resolve_transfer(config(pretrained_model_path=str(other)), base_model)


def test_pretrained_model_with_another_tokenizer_is_refused(base_model: Path, tmp_path: Path) -> None:
    other = make_tiny_model(tmp_path / "other_tok")
    tokenizer = json.loads((other / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    first, second = list(vocab)[-2:]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (other / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(TransferError, match="another tokenizer"):
        resolve_transfer(config(pretrained_model_path=str(other)), base_model)


def test_transfer_learning_needs_a_run_to_replay(base_model: Path) -> None:
    with pytest.raises(TransferError, match="trainer.replay_from: transfer_learning is on but no run"):
        resolve_transfer(config(transfer_learning=True, transfer_weight=0.5, fine_tune_steps=5), base_model)


def test_replaying_a_run_without_trajectories_is_refused(base_model: Path) -> None:
    make_run("20260101-000000-gggggggggg", "completed")
    with pytest.raises(TransferError, match="recorded no trajectories"):
        resolve_transfer(
            config(
                transfer_learning=True, replay_from="20260101-000000-gggggggggg", transfer_weight=0.5, fine_tune_steps=5
            ),
            base_model,
        )


def test_replay_with_zero_weight_is_refused(base_model: Path) -> None:
    make_run("20260101-000000-hhhhhhhhhh", "completed", trajectories=True)
    with pytest.raises(TransferError, match="transfer_weight and trainer.fine_tune_steps"):
        resolve_transfer(config(transfer_learning=True, replay_from="20260101-000000-hhhhhhhhhh"), base_model)


def test_replay_resolves_to_the_runs_trajectory_file(base_model: Path) -> None:
    paths = make_run("20260101-000000-iiiiiiiiii", "completed", trajectories=True)
    resolved = resolve_transfer(
        config(
            transfer_learning=True, replay_from="20260101-000000-iiiiiiiiii", transfer_weight=0.25, fine_tune_steps=3
        ),
        base_model,
    )
    assert resolved.infra.replay_trajectories == str(paths.trajectories)


def test_resume_and_pretrained_weights_together_are_refused(base_model: Path) -> None:
    with pytest.raises(TransferError, match="cannot be combined with trainer.resume_from"):
        resolve_transfer(config(resume_from="x", pretrained_model_path="y"), base_model)


def test_nothing_to_transfer_leaves_the_config_as_it_is(base_model: Path) -> None:
    original = config()
    assert resolve_transfer(original, base_model) is original
    assert home.runs_dir().exists() is False


def test_a_reference_model_run_id_resolves_to_its_last_checkpoint(base_model: Path, tmp_path: Path) -> None:
    make_run("20260101-000000-rrrrrrrrrr", "completed", {4: checkpoint(base_model, tmp_path / "c4")})
    resolved = resolve_transfer(config(beta=0.1, reference_model="20260101-000000-rrrrrrrrrr"), base_model)
    assert resolved.infra.reference_weights == str(tmp_path / "c4")


def test_a_reference_model_that_does_not_exist_is_refused_naming_the_field(base_model: Path, tmp_path: Path) -> None:
    with pytest.raises(TransferError, match=r"^trainer.reference_model: .*\(no config.json there\)"):
        resolve_transfer(config(beta=0.1, reference_model=str(tmp_path / "missing")), base_model)


def test_a_reference_model_of_another_architecture_is_refused(base_model: Path, tmp_path: Path) -> None:
    other = make_tiny_model(tmp_path / "wider", ModelShape(hidden_size=48))
    with pytest.raises(TransferError, match=r"^trainer.reference_model: .*another architecture"):
        resolve_transfer(config(beta=0.1, reference_model=str(other)), base_model)
