"""One input widget per config field, chosen from the field's type and constraints in the ``ConfigView``.

Numbers use ``IntText``/``FloatText``, not the bounded variants: a bounded widget silently clamps 1000 to 256,
and the user never learns the value was refused. Bounds are shown beside the field and enforced by the core's
validation, whose message appears inline. Nullable fields are text ("" or "none" = None).
"""

from __future__ import annotations

import json
import re
from typing import Any

import ipywidgets as widgets

from hermes_nb.selection.results import ConfigField, LockedField

# The label column fits the longest dotted names (env.ensure_scores_are_not_same) at the notebook's font size.
DESCRIPTION_STYLE = {"description_width": "230px"}
INPUT_LAYOUT = {"width": "420px", "flex": "0 0 auto"}
# Beside each input: the bounds ("≥ 2, ≤ 256" on one line), then the error, which takes the rest of the row.
HINT_LAYOUT = {"width": "140px", "flex": "0 0 auto", "margin": "0 0 0 8px"}
ERROR_LAYOUT = {"flex": "1 1 320px", "min_width": "320px"}
# A checkbox's name is drawn after the box, past the label column: the width of the other inputs would cut it.
CHECKBOX_LAYOUT = {"width": "560px", "flex": "0 0 auto"}
BOUND_SYMBOLS = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "length ≥", "max_length": "length ≤"}
NULL_TEXT = "none"


def css_name(field_name: str) -> str:
    """A class-name-safe form of a dotted field name: ``env.group_size`` -> ``env-group_size``."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", field_name)


def field_input(field: ConfigField) -> widgets.ValueWidget:
    """The input for ``field``, showing its current value, tagged ``hermes-nb-field-<name>``."""
    kinds = field.type.split(" | ")
    nullable = "None" in kinds
    common: dict[str, Any] = {
        "description": field.name,
        "description_allow_html": False,
        "tooltip": field.description or field.name,
        "style": DESCRIPTION_STYLE,
        "layout": INPUT_LAYOUT,
    }
    choices = field.constraints.get("choices")
    box: widgets.ValueWidget
    if choices:
        options = [(str(c), c) for c in choices] + ([(NULL_TEXT, None)] if nullable else [])
        box = widgets.Dropdown(options=options, value=field.value, **common)
    elif kinds == ["bool"]:
        box = widgets.Checkbox(value=bool(field.value), indent=True, **{**common, "layout": CHECKBOX_LAYOUT})
    elif kinds == ["int"]:
        box = widgets.IntText(value=field.value, **common)
    elif kinds == ["float"]:
        box = widgets.FloatText(value=field.value, **common)
    else:
        box = widgets.Text(value=to_text(field.value), placeholder=NULL_TEXT if nullable else "", **common)
    box.add_class(f"hermes-nb-field-{css_name(field.name)}")
    return box


def locked_input(field: LockedField) -> widgets.Text:
    box = widgets.Text(
        value=to_text(field.value),
        description=field.name,
        tooltip=f"{field.name} is decided by the run system (locked)",
        disabled=True,
        style=DESCRIPTION_STYLE,
        layout=INPUT_LAYOUT,
    )
    box.add_class("hermes-nb-locked")
    box.add_class(f"hermes-nb-field-{css_name(field.name)}")
    return box


def to_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def edited_value(box: widgets.ValueWidget, field: ConfigField) -> tuple[bool, Any]:
    """``(changed, value)``: whether the user changed the field, and the value to send to the core."""
    value = box.value
    if isinstance(box, widgets.Text):
        if value == to_text(field.value):
            return False, None
        nullable = "None" in field.type.split(" | ")
        return True, (None if nullable and value.strip() == "" else value)
    return value != field.value, value


def bounds_text(constraints: dict[str, Any]) -> str:
    parts = [f"{symbol} {constraints[key]}" for key, symbol in BOUND_SYMBOLS.items() if key in constraints]
    return ", ".join(parts)
