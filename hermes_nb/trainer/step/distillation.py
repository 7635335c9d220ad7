"""On-policy distillation (``trainer.teacher_model``): the student samples, the teacher scores every sampled token,
and each trained token's advantage gets ``- teacher_kl_coef * (log p_student - log p_teacher)`` on top of the
reward's (tinker-cookbook's ``incorporate_kl_penalty``). ``log p_student`` is the sampling logprob: the policy that
chose the token, so the term is the per-token estimate of the reverse KL(student || teacher) on the student's own
outputs. A datum whose reward advantage is zero still learns from the teacher, so ``prepare_data`` keeps it."""

from __future__ import annotations

from dataclasses import dataclass

from hermes_nb.trainer.backend import TrainingBackend
from hermes_nb.trainer.types import Datum


@dataclass(frozen=True)
class Distilled:
    """The datums with the teacher's term in their advantages, and the mean reverse KL per trained token."""

    data: list[Datum]
    teacher_kl: float


def teacher_advantages(datum: Datum, teacher_logprobs_T: list[float], coef: float) -> list[float]:
    """``datum``'s advantages plus ``- coef * (student - teacher)`` where it trains; unchanged elsewhere."""
    return [
        a - coef * (s - t) if w > 0 else a
        for a, s, t, w in zip(
            datum.advantages_T, datum.sampling_logprobs_T, teacher_logprobs_T, datum.weights_T, strict=True
        )
    ]


def reverse_kl_sum(datum: Datum, teacher_logprobs_T: list[float]) -> float:
    """Sum over the trained tokens of ``log p_student - log p_teacher`` (the sampled-token estimate of the KL)."""
    pairs = zip(datum.sampling_logprobs_T, teacher_logprobs_T, datum.weights_T, strict=True)
    return sum(s - t for s, t, w in pairs if w > 0)


def with_teacher(backend: TrainingBackend, data: list[Datum], coef: float) -> Distilled:
    """Score ``data`` with the backend's teacher and fold the term into the advantages (module doc)."""
    teacher = backend.teacher_forward(data)
    shaped = [
        d.model_copy(update={"advantages_T": teacher_advantages(d, t, coef)})
        for d, t in zip(data, teacher, strict=True)
    ]
    tokens = sum(d.num_trained_tokens for d in data)
    kl = sum(reverse_kl_sum(d, t) for d, t in zip(data, teacher, strict=True))
    return Distilled(shaped, kl / max(tokens, 1))
