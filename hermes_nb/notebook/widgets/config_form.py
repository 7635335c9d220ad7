"""Config form generated from the ``ConfigView``: editable fields by section, locked fields disabled.

Apply is all-or-nothing. Each changed field is first checked alone against the current state (the core's
pure ``editing.apply_edits``, which saves nothing) so every refusal is shown beside its own field; only when
all pass does one ``rl_edit_config(dict)`` call apply them together.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets

from hermes_nb.errors import ConfigError, HermesNBError
from hermes_nb.notebook.widgets.fields import bounds_text, css_name, edited_value, field_input, locked_input
from hermes_nb.results import ConfigField, ConfigView
from hermes_nb.syncio import run_sync

SECTION_TITLES = {"env": "Environment", "trainer": "Trainer", "wandb": "Weights & Biases"}


class _FieldRow:
    def __init__(self, field: ConfigField) -> None:
        self.field = field
        self.input = field_input(field)
        self.hint = widgets.HTML(html.escape(bounds_text(field.constraints)))
        self.error = widgets.HTML()
        self.error.add_class(f"hermes-nb-error-{css_name(field.name)}")
        self.widget = widgets.HBox([self.input, self.hint, self.error])

    def show_error(self, message: str) -> None:
        shown = f"<span style='color:#b00020'>✖ {html.escape(message)}</span>" if message else ""
        self.error.value = shown


class ConfigForm:
    def __init__(self) -> None:
        self.title = widgets.HTML()
        self.fields_box = widgets.VBox()
        self.locked_box = widgets.VBox()
        self.locked_box.add_class("hermes-nb-locked-fields")
        self.apply_button = widgets.Button(description="Apply", button_style="primary", tooltip="Apply all edits")
        self.apply_button.add_class("hermes-nb-apply")
        self.reset_button = widgets.Button(description="Reset", tooltip="Back to the environment's defaults")
        self.reset_button.add_class("hermes-nb-reset")
        self.status = widgets.HTML()
        self.status.add_class("hermes-nb-form-status")
        buttons = widgets.HBox([self.apply_button, self.reset_button, self.status])
        locked_title = widgets.HTML("<b>Locked</b> (decided by the run system)")
        self.widget = widgets.VBox([self.title, self.fields_box, buttons, locked_title, self.locked_box])
        self.widget.add_class("hermes-nb-config-form")
        self.rows: dict[str, _FieldRow] = {}
        self.view: ConfigView | None = None
        self.apply_button.on_click(lambda _: self.apply())
        self.reset_button.on_click(lambda _: self.reset())
        self.reload()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        """A cell whose value is this object shows its widget (IPython asks for this bundle)."""
        return self.widget._repr_mimebundle_(**kwargs)

    def reload(self) -> None:
        from hermes_nb.api import rl_get_current_config

        self.load(run_sync(rl_get_current_config()))

    def load(self, view: ConfigView) -> None:
        """Rebuild the form from ``view`` (after a selection, an apply or a reset)."""
        self.view = view
        self.title.value = f"<b>Config</b> of {html.escape(view.environment or '(no environment selected)')}"
        self.rows = {field.name: _FieldRow(field) for field in view.configurable}
        self.fields_box.children = self._sections()
        self.locked_box.children = [locked_input(field) for field in view.locked]

    def _sections(self) -> list[widgets.Widget]:
        children: list[widgets.Widget] = []
        for section, title in SECTION_TITLES.items():
            rows = [row.widget for name, row in self.rows.items() if name.split(".", 1)[0] == section]
            if rows:
                children += [widgets.HTML(f"<b>{title}</b>"), *rows]
        return children

    def edits(self) -> dict[str, Any]:
        """The fields the user changed, by dotted name."""
        out: dict[str, Any] = {}
        for name, row in self.rows.items():
            changed, value = edited_value(row.input, row.field)
            if changed:
                out[name] = value
        return out

    def apply(self) -> bool:
        """Check each edit, show refusals beside their fields; apply all together only if none is refused."""
        from hermes_nb.api import rl_edit_config

        edits = self.edits()
        for row in self.rows.values():
            row.show_error("")
        errors = self._field_errors(edits)
        if errors:
            for name, message in errors.items():
                self.rows[name].show_error(message)
            self._say(f"Nothing applied: {len(errors)} field(s) refused.", error=True)
            return False
        if not edits:
            self._say("No changes.")
            return True
        try:
            result = run_sync(rl_edit_config(edits))
        except HermesNBError as exc:  # a rule across fields: shown once, for the whole form
            self._say(f"Nothing applied: {exc}", error=True)
            return False
        self.load(result.config)
        self._say(result.message)
        return True

    def reset(self) -> None:
        from hermes_nb.api import rl_reset_config

        try:
            view = run_sync(rl_reset_config())
        except HermesNBError as exc:
            self._say(str(exc), error=True)
            return
        self.load(view)
        self._say("Reset to the defaults.")

    def _field_errors(self, edits: dict[str, Any]) -> dict[str, str]:
        from hermes_nb import editing
        from hermes_nb.api import current_state

        state = current_state()
        errors: dict[str, str] = {}
        for name, value in edits.items():
            try:
                editing.apply_edits(state, {name: value})
            except ConfigError as exc:
                errors[name] = str(exc).removeprefix(f"{name}: ")
        return errors

    def _say(self, message: str, error: bool = False) -> None:
        style = " style='color:#b00020'" if error else ""
        self.status.value = f"<span{style}>{html.escape(message)}</span>"
