"""A batch of scored groups into the datums a step trains on: truncated completions out of the loss (with
``trainer.mask_truncated_completions``), sequences without signal dropped, and what the step's passes need filled
in before the first one: missing sampling logprobs, the trainer's own (``old_logprobs_T``, with
``trainer.importance_sampling_cap``) and the reference policy's (``reference_logprobs_T``, with
``trainer.beta > 0``). With ``trainer.teacher_model`` every datum is kept: the teacher's term
(``hermes_nb.trainer.step.distillation``) is a signal of its own."""

from __future__ import annotations

from hermes_nb.config import TrainerConfig
from hermes_nb.protocol.trajectory import MASK_IGNORE, ScoredDataGroup
from hermes_nb.trainer.backend import TrainingBackend
from hermes_nb.trainer.step.advantages import group_data, has_signal
from hermes_nb.trainer.types import Datum


def without_truncated(group: ScoredDataGroup, max_token_len: int) -> ScoredDataGroup:
    """``group`` with its truncated members' masks all ``MASK_IGNORE`` (weight 0 in the loss). Their scores still
    count in the group's advantages, as TRL's mask_truncated_completions leaves them."""
    cut = group.truncations(max_token_len)
    if not any(cut):
        return group
    masks = [[MASK_IGNORE] * len(m) if c else m for m, c in zip(group.masks, cut, strict=True)]
    return group.model_copy(update={"masks": masks})


def trainable_data(batch: list[ScoredDataGroup], keep_all: bool = False) -> tuple[list[Datum], list[int]]:
    """Datums that carry a learning signal (``keep_all``: every one, as a teacher gives each a signal of its own),
    and the indices of those sent without sampling logprobs."""
    data: list[Datum] = []
    missing: list[int] = []
    for group in batch:
        group_datums, has_logprobs = group_data(group)
        for datum, sent in zip(group_datums, has_logprobs, strict=True):
            if not keep_all and not has_signal(datum):
                continue  # zero advantage everywhere: no gradient under either loss, only compute
            if not sent:
                missing.append(len(data))
            data.append(datum)
    return data, missing


def prepare_data(
    backend: TrainingBackend,
    batch: list[ScoredDataGroup],
    trainer: TrainerConfig | None = None,
    max_token_len: int | None = None,
) -> list[Datum]:
    """Datums that carry a learning signal; missing sampling logprobs come from the current policy (on-policy,
    so the importance ratio starts at 1). ``trainer`` adds what its fields ask for (the module doc)."""
    trainer = trainer or TrainerConfig()
    if trainer.mask_truncated_completions and max_token_len is not None:
        batch = [without_truncated(group, max_token_len) for group in batch]
    data, missing = trainable_data(batch, keep_all=trainer.teacher_model is not None)
    if not data:
        return data
    needs_current = trainer.importance_sampling_cap is not None
    if missing or needs_current:
        # One forward for both: the same weights give the on-policy sampling logprobs and the "old" ones.
        asked = list(range(len(data))) if needs_current else missing
        current = dict(zip(asked, backend.forward([data[i] for i in asked]), strict=True))
        for i in missing:
            data[i] = data[i].model_copy(update={"sampling_logprobs_T": current[i]})
        if needs_current:
            data = [d.model_copy(update={"old_logprobs_T": current[i]}) for i, d in enumerate(data)]
    if trainer.beta > 0:
        reference = backend.reference_forward(data)
        data = [d.model_copy(update={"reference_logprobs_T": r}) for d, r in zip(data, reference, strict=True)]
    return data
