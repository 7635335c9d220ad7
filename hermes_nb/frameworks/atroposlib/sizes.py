"""The sizes a run takes from an atroposlib environment's config: ``batch_size``, ``total_steps``, ``group_size``.

atroposlib lets the trainer decide ``batch_size`` and ``total_steps`` (its ``-1``) and reads them from the API;
in a hermes-nb run they are the run's settings (the trainer registers them), so selection puts the run's default
where an environment leaves them to the trainer, and a start refuses sizes no run can use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hermes_nb.config import BaseEnvConfig, RunConfig
from hermes_nb.errors import ConfigError

# atroposlib's value for "the trainer decides".
TRAINER_DECIDES = -1
RUN_DECIDED_FIELDS = ("batch_size", "total_steps")
RUN_SIZES = ("batch_size", "total_steps", "group_size")


def selection_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """``config_init()``'s values as a run's starting config: where atroposlib leaves ``batch_size`` or
    ``total_steps`` to the trainer (``TRAINER_DECIDES``, or any value below 1), the run's default stands in, so the
    config shows what a run will use."""
    chosen = dict(values)
    for name in RUN_DECIDED_FIELDS:
        if isinstance(chosen.get(name), int) and chosen[name] < 1:
            chosen[name] = BaseEnvConfig.model_fields[name].default
    return chosen


def check_startable(config: RunConfig) -> None:
    """Raise ``ConfigError`` naming the field when the run's sizes cannot make a run."""
    sizes = {name: config.env.get(name) for name in RUN_SIZES}
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"env.{name}: a run needs a whole number >= 1, got {value!r}; set it with rl_edit_config")
    if sizes["group_size"] > sizes["batch_size"]:  # type: ignore[operator]
        raise ConfigError(
            f"env.group_size: {sizes['group_size']} is larger than env.batch_size {sizes['batch_size']}; "
            "a batch is made of whole groups"
        )
