"""What differs between runs' configs, as dotted names (``trainer.learning_rate``), and the short labels the runs
table and the overlaid plot show for it (``lr=3e-4, group=8``).

Only what a user sets is compared: the locked infrastructure (ports, directories, the run id) and the W&B run name
differ between any two runs and say nothing about them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from hermes_nb.config import LOCKED_FIELDS, RunConfig

# The sections a user edits, in the order their fields are shown.
COMPARED_SECTIONS = ("env", "trainer", "wandb", "tinker", "health")
# Decided per run by the run system, though not locked against edits.
_PER_RUN = frozenset({"wandb.run_name"})
# Short names of the fields most often varied, for labels; any other field is shown by its key.
SHORT_NAMES: dict[str, str] = {
    "trainer.learning_rate": "lr",
    "env.group_size": "group",
    "env.batch_size": "batch",
    "env.total_steps": "steps",
    "trainer.loss": "loss",
    "trainer.base_model": "model",
    "trainer.lora_rank": "lora",
    "env.seed": "env_seed",
    "trainer.seed": "seed",
    "env.max_token_length": "max_len",
    "env.temperature": "temp",
    "env.steps_per_eval": "eval_every",
}


def flat_config(config: RunConfig) -> dict[str, Any]:
    """The user-set fields of ``config`` by dotted name, values as JSON gives them."""
    data = config.model_dump(mode="json")
    flat: dict[str, Any] = {}
    for section in COMPARED_SECTIONS:
        for key, value in data[section].items():
            name = f"{section}.{key}"
            if name not in LOCKED_FIELDS and name not in _PER_RUN:
                flat[name] = value
    return flat


def differences(config: Mapping[str, Any], baseline: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``config`` whose value is not the baseline's (a field one of them lacks counts), ordered as
    ``ordered`` orders them."""
    names = [n for n in {**baseline, **config} if config.get(n) != baseline.get(n)]
    return {name: config.get(name) for name in ordered(names)}


def ordered(names: Iterable[str]) -> list[str]:
    """The commonly varied fields first, in ``SHORT_NAMES``' order, then the rest by name."""
    rank = {name: index for index, name in enumerate(SHORT_NAMES)}
    return sorted(set(names), key=lambda name: (rank.get(name, len(rank)), name))


def short_name(name: str) -> str:
    return SHORT_NAMES.get(name, name.rsplit(".", 1)[-1])


def value_label(value: Any) -> str:
    """A value as a label shows it: ``3e-4``, ``0.5``, ``8``, ``ppo``."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        if value != 0 and not 1e-2 <= abs(value) < 1e5:
            mantissa, _, exponent = f"{value:.3e}".partition("e")
            return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
        return f"{value:.6g}"
    return value if isinstance(value, str) else json.dumps(value)


def label(config: Mapping[str, Any], fields: Iterable[str]) -> str:
    """``lr=3e-4, group=8``: this run's values of ``fields`` (what varies across the runs shown)."""
    return ", ".join(f"{short_name(name)}={value_label(config.get(name))}" for name in fields)
