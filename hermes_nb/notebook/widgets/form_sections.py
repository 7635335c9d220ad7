"""How the config form is laid out: one collapsible section per config section, the most used fields first.

Some 50 editable and 18 locked fields in one column is a page of scrolling; the environment's fields (what a user
edits most) start open, the trainer's and W&B's start folded, and the locked ones are folded at the end.
"""

from __future__ import annotations

from collections.abc import Iterable

import ipywidgets as widgets

from hermes_nb.config import ALGORITHM_FIELDS, BaseEnvConfig
from hermes_nb.selection.results import ConfigField

SECTION_TITLES = {"env": "Environment", "trainer": "Trainer", "algorithm": "RL algorithm", "wandb": "Weights & Biases"}
# The trainer fields that choose the algorithm get a section of their own: 15 of them among the trainer's would
# bury the model and the learning rate.
ALGORITHM_SECTION = "algorithm"
OPEN_SECTIONS = frozenset({"env"})
# The fields changed most often, first in their section: how long a run is, how much it samples per step,
# how fast it learns, which model.
FIRST_FIELDS = (
    "env.total_steps",
    "env.group_size",
    "env.batch_size",
    "env.steps_per_eval",
    "env.temperature",
    "trainer.learning_rate",
    "trainer.base_model",
    "trainer.backend",
    "trainer.lora_rank",
    "wandb.project",
    "wandb.run_name",
    "wandb.mode",
)
LOCKED_TITLE = "Locked (decided by the run system)"


def section_of(name: str) -> str:
    """The form section of a dotted field name: its config section, or the algorithm's for those trainer fields."""
    section, _, field = name.partition(".")
    return ALGORITHM_SECTION if section == "trainer" and field in ALGORITHM_FIELDS else section


def field_order(fields: Iterable[ConfigField]) -> list[ConfigField]:
    """The most used fields, then the environment's own fields (those the base config lacks), then the rest."""
    first = {name: rank for rank, name in enumerate(FIRST_FIELDS)}

    def rank(item: tuple[int, ConfigField]) -> tuple[int, int]:
        position, field = item
        if field.name in first:
            return (0, first[field.name])
        own = section_of(field.name) == "env" and field.name.split(".", 1)[1] not in BaseEnvConfig.model_fields
        return (1 if own else 2, position)

    return [field for _, field in sorted(enumerate(fields), key=rank)]


def section(title: str, is_open: bool, css_class: str) -> tuple[widgets.Accordion, widgets.VBox]:
    """A one-panel accordion (each opens and folds by itself) and the box its rows go in."""
    box = widgets.VBox()
    accordion = widgets.Accordion(children=[box], selected_index=0 if is_open else None)
    accordion.set_title(0, title)
    accordion.add_class(css_class)
    return accordion, box
