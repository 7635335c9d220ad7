"""Which of the trainer's algorithm fields a run on Tinker can honour, decided before the run starts.

What the loop does itself works on either backend: ``scale_rewards``, the learning-rate schedule,
``num_iterations`` (several ``forward_backward`` + ``optim_step`` on one batch; the ratio is taken against the
sampling logprobs sent with every pass), ``mask_truncated_completions`` and ``dynamic_sampling``. What happens
inside the server's loss does not: Tinker computes its own losses by name and sums over tokens
(``hermes_nb.tinker.datums`` scales the advantages to hermes-nb's token-mean, which is ``dapo``/``bnpo``), and
SkyRL 0.3.0, the self-hosted server this is tested against, wires only ``cross_entropy`` and
``importance_sampling`` (and ``ppo`` where the hosted service serves it). So these are refused, naming the field
and the server: an objective whose definition does not name the Tinker backend (``hermes_nb.objectives``), another
aggregation, the sequence-level ratio (GSPO), the mismatch correction (it needs a ratio of the trainer's to the
sampler's logprobs inside the loss). The KL penalty goes the way tinker-cookbook
takes it: the base model's ``compute_logprobs`` (a sampling client of the server's) folded into the advantages as
a k1 penalty, so ``kl_estimator`` must be k1 there and the reference is the base model.
"""

from __future__ import annotations

from hermes_nb.config import TrainerConfig
from hermes_nb.objectives import OBJECTIVES, TINKER, objective_names

# The aggregations Tinker's summed loss reproduces with the token-mean scaling of ``hermes_nb.tinker.datums``.
TINKER_AGGREGATIONS = ("dapo", "bnpo")
# The KL penalty on Tinker: the base model's compute_logprobs against the sampled tokens' logprobs, folded into the
# advantages (hermes_nb.tinker.datums.with_kl_penalty): a reward penalty, which is k1's estimate.
TINKER_KL_ESTIMATOR = "k1"


def tinker_field_problem(trainer: TrainerConfig, server: str) -> str | None:
    """Why ``trainer`` asks for what the Tinker server at ``server`` cannot do, naming the field; None if it fits."""
    where = f"the Tinker server at {server}"
    if TINKER not in OBJECTIVES[trainer.loss].backends:
        sent = ", ".join(objective_names(TINKER))
        return f"trainer.loss: {trainer.loss!r} is not a loss {where} is sent; use one of {sent}"
    if trainer.loss_type not in TINKER_AGGREGATIONS:
        return (
            f"trainer.loss_type: {trainer.loss_type!r} cannot be computed by {where}, which sums token losses; "
            f"use {' or '.join(TINKER_AGGREGATIONS)} (the token-mean), or trainer.backend: local"
        )
    if trainer.importance_sampling_level != "token":
        return (
            f"trainer.importance_sampling_level: 'sequence' (GSPO) is not a loss {where} offers; "
            "use 'token', or trainer.backend: local"
        )
    if trainer.importance_sampling_cap is not None:
        return (
            f"trainer.importance_sampling_cap: {where} has no truncated importance sampling in its losses; "
            "leave it unset, or use trainer.backend: local"
        )
    if trainer.beta > 0 and trainer.kl_estimator != TINKER_KL_ESTIMATOR:
        return (
            f"trainer.kl_estimator: {trainer.kl_estimator!r}: on {where} the KL penalty is folded into the "
            f"advantages as a {TINKER_KL_ESTIMATOR} penalty (tinker-cookbook's); set kl_estimator: "
            f"{TINKER_KL_ESTIMATOR}, or use trainer.backend: local"
        )
    if trainer.beta > 0 and trainer.reference_model is not None:
        return (
            f"trainer.reference_model: on {where} the KL's reference is the base model the server samples; "
            "leave reference_model unset, or use trainer.backend: local"
        )
    return None
