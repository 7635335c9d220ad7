"""On-policy distillation (trainer.teacher_model): the teacher's term in the advantages, against a direct
computation on small models; the teacher resolved and refused before launch as the other model fields are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hermes_nb.config import RunConfig, TrainerConfig
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.run_files import TINKER_CHECKPOINT_FILE
from hermes_nb.protocol.tinker import TinkerCheckpoint
from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.runs.transfer.resolve import TransferError, resolve_transfer
from hermes_nb.testing import ModelShape, make_tiny_model
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.run.loop import train_step
from hermes_nb.trainer.step.distillation import with_teacher
from hermes_nb.trainer.types import Datum

torch.set_num_threads(1)
COEF = 0.5


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("student"), seed=1)


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Another architecture (wider, deeper), the same tokenizer: what a teacher usually is.
    shape = ModelShape(hidden_size=48, intermediate_size=96, num_hidden_layers=3)
    return make_tiny_model(tmp_path_factory.mktemp("teacher"), shape, seed=2)


def _direct_logprobs(model_dir: Path, datum: Datum) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    with torch.no_grad():
        logits_1TV = model(input_ids=torch.tensor([datum.input_tokens_T])).logits
    targets_T1 = torch.tensor(datum.target_tokens_T)[:, None]
    return torch.log_softmax(logits_1TV[0], -1).gather(-1, targets_T1).squeeze(-1)  # [T]


def _sampled(backend: LocalBackend, tokens: list[int], advantage: float) -> Datum:
    n = len(tokens) - 1
    datum = Datum(
        input_tokens_T=tokens[:-1],
        target_tokens_T=tokens[1:],
        weights_T=[0.0, *[1.0] * (n - 1)],
        sampling_logprobs_T=[0.0] * n,
        advantages_T=[advantage] * n,
    )
    (sampled,) = backend.forward([datum])
    return datum.model_copy(update={"sampling_logprobs_T": sampled})


def test_each_trained_tokens_advantage_gets_minus_coef_times_student_minus_teacher(
    student_dir: Path, teacher_dir: Path
) -> None:
    backend = LocalBackend(student_dir, teacher_weights=teacher_dir)
    datum = _sampled(backend, [10, 11, 12, 13, 14, 15], 0.25)
    distilled = with_teacher(backend, [datum], COEF)
    student, teacher = _direct_logprobs(student_dir, datum), _direct_logprobs(teacher_dir, datum)
    expected = 0.25 - COEF * (student - teacher)
    expected[0] = 0.25  # the prompt's position trains on nothing: its advantage is left as it was
    assert torch.allclose(torch.tensor(distilled.data[0].advantages_T), expected, atol=1e-5)
    assert distilled.teacher_kl == pytest.approx(float((student - teacher)[1:].mean()), abs=1e-5)


def test_a_step_with_a_teacher_trains_groups_of_equal_scores_and_logs_the_teacher_kl(
    student_dir: Path, teacher_dir: Path
) -> None:
    backend = LocalBackend(student_dir, teacher_weights=teacher_dir)
    group = ScoredDataGroup(
        tokens=[[10, 11, 12, 13], [10, 11, 14, 15]],
        masks=[[-100, -100, 12, 13], [-100, -100, 14, 15]],
        scores=[1.0, 1.0],
    )
    values = train_step(backend, [group], TrainerConfig(teacher_model=str(teacher_dir), teacher_kl_coef=COEF))
    assert values[keys.TRAIN_TRAINED_SEQUENCES] == 2.0
    assert keys.TRAIN_TEACHER_KL in values


def test_a_step_without_a_teacher_logs_no_teacher_kl(student_dir: Path) -> None:
    backend = LocalBackend(student_dir)
    group = ScoredDataGroup(
        tokens=[[10, 11, 12, 13], [10, 11, 14, 15]],
        masks=[[-100, -100, 12, 13], [-100, -100, 14, 15]],
        scores=[1.0, 0.0],
    )
    assert keys.TRAIN_TEACHER_KL not in train_step(backend, [group], TrainerConfig())


def _config(**trainer: object) -> RunConfig:
    return RunConfig.model_validate({"trainer": trainer})


def test_a_teacher_directory_resolves_into_infra_teacher_weights(student_dir: Path, teacher_dir: Path) -> None:
    resolved = resolve_transfer(_config(teacher_model=str(teacher_dir)), student_dir)
    assert resolved.infra.teacher_weights == str(teacher_dir)


def test_a_teacher_whose_tokenizer_differs_is_refused_naming_the_field(
    student_dir: Path, teacher_dir: Path, tmp_path: Path
) -> None:
    other = make_tiny_model(tmp_path / "other")
    tokenizer = json.loads((other / "tokenizer.json").read_text())
    tokenizer["model"]["vocab"] = {f"x{token}": i for token, i in tokenizer["model"]["vocab"].items()}
    (other / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(TransferError, match=r"^trainer.teacher_model: .* does not share the tokenizer"):
        resolve_transfer(_config(teacher_model=str(other)), student_dir)


def _tinker_checkpoint(directory: Path, base_model: str) -> Path:
    directory.mkdir(parents=True)
    (directory / "config.json").write_text("{}")
    saved = TinkerCheckpoint(
        state_path="tinker://run-1/weights/final",
        sampler_path="tinker://run-1/sampler_weights/final",
        base_model=base_model,
        lora_rank=8,
        base_url="http://127.0.0.1:1",
    )
    (directory / TINKER_CHECKPOINT_FILE).write_text(saved.model_dump_json())
    return directory


def _on_tinker(teacher: Path) -> RunConfig:
    return _config(teacher_model=str(teacher), backend="tinker", lora_rank=8, base_model="org/base")


def test_a_tinker_teacher_resolves_to_its_checkpoints_sampler_weights(student_dir: Path, tmp_path: Path) -> None:
    teacher = _tinker_checkpoint(tmp_path / "teacher", "org/base")
    resolved = resolve_transfer(_on_tinker(teacher), student_dir)
    assert resolved.infra.teacher_weights == "tinker://run-1/sampler_weights/final"


def test_a_tinker_teacher_on_another_base_model_is_refused_before_launch(student_dir: Path, tmp_path: Path) -> None:
    teacher = _tinker_checkpoint(tmp_path / "teacher", "org/other")
    with pytest.raises(TransferError, match=r"^trainer.teacher_model: .* trained on 'org/other'.*tokenizer"):
        resolve_transfer(_on_tinker(teacher), student_dir)


def test_local_weights_as_a_tinker_runs_teacher_are_refused_before_launch(student_dir: Path, teacher_dir: Path) -> None:
    with pytest.raises(TransferError, match=r"^trainer.teacher_model: .* holds no Tinker sampler weights"):
        resolve_transfer(_on_tinker(teacher_dir), student_dir)
