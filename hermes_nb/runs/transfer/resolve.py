"""Resume, transfer and replay inputs, resolved and checked before anything starts.

The trainer never interprets run ids: the launcher turns ``trainer.resume_from``, ``pretrained_model_path`` and
``replay_from`` into paths in ``infra`` (``resume_checkpoint`` + ``start_step``, ``init_weights``,
``replay_trajectories``), and ``reference_model`` (the KL penalty's reference) into ``reference_weights``.
Every unusable input is a ``TransferError`` naming the field and what would do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hermes_nb.config import RunConfig
from hermes_nb.errors import TinkerError, TransferError, UnknownRunError
from hermes_nb.protocol.checkpoints import CheckpointRecord, read_checkpoints
from hermes_nb.protocol.run_files import TRAINER_STATE_FILE, RunPaths
from hermes_nb.protocol.tinker import TinkerCheckpoint, read_checkpoint
from hermes_nb.runs.run_dirs import known_run_ids, resolve_run
from hermes_nb.runs.supervision.damage import Damage, current_state, file_damage

# "unknown": run.json cannot be read and no process of the run is running (hermes_nb.runs.supervision.damage).
RESUMABLE_STATUSES = ("stopped", "failed", "completed", "unknown")
BEST_SUFFIX = "@best"
# Architecture fields that must agree for weights of one model to load into another's shape.
_SHAPE_KEYS = (
    "model_type",
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
)


def _run_paths(field: str, run_id: str) -> RunPaths:
    try:
        return resolve_run(run_id)
    except UnknownRunError as exc:
        raise TransferError(f"{field}: {exc}") from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def resume_point(run_id: str, total_steps: int) -> tuple[str, int]:
    """The last checkpoint of a finished run that has optimizer state, and its step.

    Damaged files do not stop a resume: a checkpoint whose directory or trainer state is gone, or whose line in
    ``checkpoints.jsonl`` was cut short, is passed over for the one before it (``resume_damage`` says so)."""
    paths = _run_paths("trainer.resume_from", run_id)
    state, damaged = current_state(paths)
    if state.status not in RESUMABLE_STATUSES:
        supervisor = state.processes.get("supervisor")
        if damaged and supervisor is not None:
            raise TransferError(
                f"trainer.resume_from: run {run_id} is still running (its supervisor, pid {supervisor.pid}) and "
                f"its run.json cannot be read, so it cannot be stopped from here; end pid {supervisor.pid} first"
            )
        raise TransferError(
            f"trainer.resume_from: run {run_id} is {state.status}; stop it first (only a stopped, failed or "
            "completed run can be resumed)"
        )
    usable = _resumable_checkpoints(paths)
    if not usable:
        raise TransferError(f"trainer.resume_from: run {run_id} has no checkpoint with trainer state to resume from")
    last = usable[-1]
    if last.step >= total_steps:
        raise TransferError(
            f"total_steps: run {run_id} already reached step {last.step}; set total_steps above {last.step} to resume"
        )
    return last.path, last.step


def _resumable_checkpoints(paths: RunPaths) -> list[CheckpointRecord]:
    return [c for c in read_checkpoints(paths.checkpoints_index) if (Path(c.path) / TRAINER_STATE_FILE).is_file()]


def resume_damage(run_id: str) -> list[Damage]:
    """What is wrong with the files of the run ``run_id`` resumes, including checkpoints passed over."""
    paths = resolve_run(run_id)
    _, damaged = current_state(paths)
    damaged += file_damage(paths, ended=True)
    for record in read_checkpoints(paths.checkpoints_index):
        if not (Path(record.path) / TRAINER_STATE_FILE).is_file():
            problem = f"step {record.step} has no {TRAINER_STATE_FILE} (optimizer state); not resumed from"
            damaged.append(Damage(file=record.path, problem=problem))
    return damaged


def _best_checkpoint(paths: RunPaths, checkpoints: list[CheckpointRecord]) -> CheckpointRecord:
    """The checkpoint whose most recent evaluation (at or before its step) scored highest."""
    from hermes_nb.metrics.reader import read_all_metrics
    from hermes_nb.protocol.metrics import EVAL_PERCENT_CORRECT

    evals = [
        (r.step, r.values[EVAL_PERCENT_CORRECT])
        for r in read_all_metrics(paths.env_metrics)
        if EVAL_PERCENT_CORRECT in r.values
    ]

    def score(checkpoint: CheckpointRecord) -> float:
        before = [value for step, value in evals if step <= checkpoint.step]
        return before[-1] if before else -1.0

    return max(checkpoints, key=lambda c: (score(c), c.step))


def weights_path(reference: str, field: str = "trainer.pretrained_model_path") -> Path:
    """A run id (its final checkpoint), ``<run id>@best``, a checkpoint directory, or a model directory."""
    run_id = reference.removesuffix(BEST_SUFFIX)
    if run_id in known_run_ids():
        paths = resolve_run(run_id)
        checkpoints = read_checkpoints(paths.checkpoints_index)
        if not checkpoints:
            raise TransferError(f"{field}: run {run_id} has no checkpoint")
        chosen = _best_checkpoint(paths, checkpoints) if reference.endswith(BEST_SUFFIX) else checkpoints[-1]
        return Path(chosen.path)
    path = Path(reference).expanduser()
    if not (path / "config.json").is_file():
        raise TransferError(
            f"{field}: {reference!r} is neither a run id nor a model or checkpoint directory "
            "(no config.json there); use a run id from rl_list_runs(), '<run id>@best', or a directory"
        )
    return path


def check_compatible(weights: Path, base_model: Path, field: str = "trainer.pretrained_model_path") -> None:
    """Same architecture shape and the same tokenizer vocabulary as the run's base model."""
    source, target = _read_json(weights / "config.json"), _read_json(base_model / "config.json")
    differing = [k for k in _SHAPE_KEYS if source.get(k) != target.get(k)]
    if differing:
        shown = ", ".join(f"{k} {source.get(k)!r} vs {target.get(k)!r}" for k in differing)
        raise TransferError(f"{field}: {weights} has another architecture than the base model {base_model} ({shown})")
    source_vocab = _read_json(weights / "tokenizer.json").get("model", {}).get("vocab")
    target_vocab = _read_json(base_model / "tokenizer.json").get("model", {}).get("vocab")
    if source_vocab is not None and target_vocab is not None and source_vocab != target_vocab:
        raise TransferError(f"{field}: {weights} uses another tokenizer than the base model {base_model}")


def check_resume_backend(config: RunConfig, checkpoint: Path) -> None:
    """A run resumes on the backend that saved its optimizer state: a Tinker checkpoint's is on the server."""
    remote = read_checkpoint(checkpoint) is not None
    if remote == (config.trainer.backend == "tinker"):
        return
    saved_on = "tinker" if remote else "local"
    raise TransferError(
        f"trainer.backend: run {config.trainer.resume_from} trained on the {saved_on} backend and resumes only there "
        f"(its optimizer state is {'on the Tinker server' if remote else 'local'}); set trainer.backend "
        f"{saved_on!r}, or start a new run from its weights with trainer.pretrained_model_path"
    )


def transfer_weights(config: RunConfig, weights: Path, base_model_dir: Path) -> Path:
    """The directory the trainer loads the initial weights from. A Tinker run starts from a Tinker checkpoint
    (the server loads it); a local run from a model or local checkpoint directory, or from a Tinker checkpoint's
    weights downloaded and merged into its base model here (``tinker_weights.checkpoint_weights``)."""
    saved = read_checkpoint(weights)
    if config.trainer.backend == "tinker":
        check_tinker_source(config, weights, saved)
        return weights
    if saved is not None:
        weights = local_copy(weights, saved)
    check_compatible(weights, base_model_dir)
    return weights


def check_tinker_source(config: RunConfig, weights: Path, saved: TinkerCheckpoint | None) -> None:
    from hermes_nb.tinker.calls import tinker_model_name

    trainer = config.trainer
    if saved is None:
        raise TransferError(
            f"trainer.pretrained_model_path: {weights} holds local weights; a run on the tinker backend starts from "
            "a Tinker run's checkpoint (its run id, '<run id>@best' or checkpoint directory) or from the server's "
            "base model (trainer.base_model)"
        )
    if saved.base_model != tinker_model_name(trainer.base_model) or saved.lora_rank != trainer.lora_rank:
        raise TransferError(
            f"trainer.pretrained_model_path: {weights} is LoRA rank {saved.lora_rank} on {saved.base_model!r}; "
            f"this run trains rank {trainer.lora_rank} on {tinker_model_name(trainer.base_model)!r}; set "
            "trainer.base_model and trainer.lora_rank to match"
        )


def local_copy(weights: Path, saved: TinkerCheckpoint) -> Path:
    """A Tinker checkpoint's weights as a local model directory (the adapter merged into its base model)."""
    from hermes_nb.tinker.weights import checkpoint_weights_in_child  # brings the SDK: only when needed

    if not (Path(saved.base_model).expanduser() / "config.json").is_file():
        raise TransferError(
            f"trainer.pretrained_model_path: {weights} is a LoRA adapter on {saved.base_model!r}, which is not a "
            "model directory on this machine to merge it into; a local run starts from a Tinker checkpoint of a "
            "base model served from a local directory (rl_get_results(run_id, download=True) fetches the adapter)"
        )
    try:
        return checkpoint_weights_in_child(weights)
    except TinkerError as exc:
        raise TransferError(f"trainer.pretrained_model_path: {exc}") from None


def reference_weights(config: RunConfig, base_model_dir: Path) -> Path:
    """The model directory of ``trainer.reference_model``: a run id (its last checkpoint), ``<run id>@best``, a
    checkpoint or a model directory, of the base model's architecture and tokenizer. A local run's only: on Tinker
    the reference is the server's base model."""
    field = "trainer.reference_model"
    reference = str(config.trainer.reference_model)
    if config.trainer.backend == "tinker":
        raise TransferError(
            f"{field}: the tinker backend scores the KL penalty against its base model only; leave {field} unset"
        )
    weights = weights_path(reference, field)
    if read_checkpoint(weights) is not None:
        raise TransferError(
            f"{field}: {weights} is a Tinker checkpoint (its weights are on the server); name a local run's "
            "checkpoint or a model directory"
        )
    check_compatible(weights, base_model_dir, field)
    return weights


def teacher_weights(config: RunConfig, base_model_dir: Path) -> str:
    """Where ``trainer.teacher_model`` is scored (resolved as ``reference_model`` is): a local run's model directory
    of any architecture but the base model's tokenizer, since the teacher scores the student's own tokens; a Tinker
    run's teacher is a Tinker checkpoint's sampler weights on the server (``tinker_teacher``)."""
    field = "trainer.teacher_model"
    weights = weights_path(str(config.trainer.teacher_model), field)
    saved = read_checkpoint(weights)
    if config.trainer.backend == "tinker":
        return tinker_teacher(config, weights, saved)
    if saved is not None:
        raise TransferError(f"{field}: {weights} is a Tinker checkpoint (its weights are on the server)")
    teacher_vocab = _read_json(weights / "tokenizer.json").get("model", {}).get("vocab")
    student_vocab = _read_json(base_model_dir / "tokenizer.json").get("model", {}).get("vocab")
    if teacher_vocab is None or teacher_vocab != student_vocab:
        raise TransferError(
            f"{field}: {weights} does not share the tokenizer of the base model {base_model_dir} (tokenizer.json's "
            "vocabulary differs or is missing); the teacher must score the student's own tokens"
        )
    return str(weights)


def tinker_teacher(config: RunConfig, weights: Path, saved: TinkerCheckpoint | None) -> str:
    """The sampler weights of a Tinker run's checkpoint on the run's base model (so the same tokenizer), which
    the server scores by ``compute_logprobs``."""
    from hermes_nb.tinker.calls import tinker_model_name

    field = "trainer.teacher_model"
    if saved is None or saved.sampler_path is None:
        raise TransferError(
            f"{field}: {weights} holds no Tinker sampler weights; on the tinker backend the teacher is a Tinker run "
            "(its run id, '<run id>@best' or checkpoint directory)"
        )
    if saved.base_model != tinker_model_name(config.trainer.base_model):
        raise TransferError(
            f"{field}: {weights} was trained on {saved.base_model!r}, this run on "
            f"{tinker_model_name(config.trainer.base_model)!r}; the teacher must share the student's tokenizer"
        )
    return saved.sampler_path


def replay_file(run_id: str) -> Path:
    paths = _run_paths("trainer.replay_from", run_id)
    if not paths.trajectories.is_file() or paths.trajectories.stat().st_size == 0:
        raise TransferError(
            f"trainer.replay_from: run {run_id} recorded no trajectories ({paths.trajectories} "
            "is missing or empty); replay a run that trained at least one step"
        )
    return paths.trajectories


def resolve_transfer(config: RunConfig, base_model_dir: Path) -> RunConfig:
    trainer = config.trainer
    updates: dict[str, Any] = {}
    if trainer.resume_from and trainer.pretrained_model_path:
        raise TransferError(
            "trainer.pretrained_model_path: cannot be combined with trainer.resume_from; a resumed "
            "run continues from its own weights"
        )
    if trainer.resume_from:
        total_steps = int(config.env_value("total_steps"))
        updates["resume_checkpoint"], updates["start_step"] = resume_point(trainer.resume_from, total_steps)
        check_resume_backend(config, Path(updates["resume_checkpoint"]))
    if trainer.pretrained_model_path:
        weights = weights_path(trainer.pretrained_model_path)
        updates["init_weights"] = str(transfer_weights(config, weights, base_model_dir))
    if trainer.transfer_learning:
        if not trainer.replay_from:
            raise TransferError(
                "trainer.replay_from: transfer_learning is on but no run to replay is named; set it "
                "to a run id from rl_list_runs()"
            )
        if trainer.transfer_weight <= 0 or trainer.fine_tune_steps <= 0:
            raise TransferError(
                "trainer.transfer_weight and trainer.fine_tune_steps: both must be > 0 when "
                "transfer_learning is on, or nothing is replayed"
            )
        updates["replay_trajectories"] = str(replay_file(trainer.replay_from))
    if trainer.reference_model:
        updates["reference_weights"] = str(reference_weights(config, base_model_dir))
    if trainer.teacher_model:
        updates["teacher_weights"] = teacher_weights(config, base_model_dir)
    if not updates:
        return config
    return config.model_copy(update={"infra": config.infra.model_copy(update=updates)})
