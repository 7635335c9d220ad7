"""A local backend after one optimizer step, so a checkpoint of it carries real Adam moments."""

from __future__ import annotations

from pathlib import Path

from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.types import AdamParams, Datum


def trained_backend(model_dir: Path) -> LocalBackend:
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
