"""Config form generated from the ``ConfigView``: editable fields by section, locked fields disabled.

The form calls the synchronous selection service (``selection/service.py``), not the async ``rl_*`` commands:
nothing there waits, so a button's callback needs no event loop. Apply is all-or-nothing and one call,
``service.apply_checked``: the edits are validated together once and, when that passes, saved; when it refuses, each
edit is checked alone so every refusal is shown beside its own field (a rule across fields, once for the form).

The config can also change from a cell (``rl_edit_config``, ``rl_load_config``) or another process. While the
form is shown, a daemon thread compares the session file's identity every second (one ``stat``) and, when it
moved, reloads the values of the fields the user has not touched; edits not yet applied stay as typed.

Under the buttons, the pre-run estimate of the run Start would begin (``estimate_line.py``) follows every change
of a field, applied or not; when the run cannot fit, the fields that would make it fit are marked.
"""

from __future__ import annotations

import html
import threading
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from hermes_nb.errors import HermesNBError
from hermes_nb.notebook.widgets.estimate_line import EstimateLine, fields_named
from hermes_nb.notebook.widgets.fields import (
    ERROR_LAYOUT,
    HINT_LAYOUT,
    bounds_text,
    css_name,
    edited_value,
    field_input,
    locked_input,
    to_text,
)
from hermes_nb.notebook.widgets.form_sections import (
    LOCKED_TITLE,
    OPEN_SECTIONS,
    SECTION_TITLES,
    field_order,
    section,
    section_of,
)
from hermes_nb.notebook.widgets.refresher import Refresher
from hermes_nb.runs.estimate import RunEstimate
from hermes_nb.selection import service, session
from hermes_nb.selection.results import ConfigField, ConfigView

# A stat of the session file each second notices a cell's edit before the user looks back at the form.
WATCH_INTERVAL_S = 1.0
ReloadCallback = Callable[[ConfigView], None]
# A field the estimate names to make the run fit: outlined, so it is found among some 50.
TO_CHANGE_CLASS = "hermes-nb-estimate-change"


class _FieldRow:
    def __init__(self, field: ConfigField) -> None:
        self.field = field
        self.input = field_input(field)
        self.hint = widgets.HTML(html.escape(bounds_text(field.constraints)), layout=HINT_LAYOUT)
        self.error = widgets.HTML(layout=ERROR_LAYOUT)
        self.error.add_class(f"hermes-nb-error-{css_name(field.name)}")
        self.widget = widgets.HBox([self.input, self.hint, self.error], layout={"width": "100%"})

    @property
    def edited(self) -> bool:
        return edited_value(self.input, self.field)[0]

    def show_error(self, message: str) -> None:
        shown = f"<span style='color:#b00020'>✖ {html.escape(message)}</span>" if message else ""
        self.error.value = shown

    def follow(self, field: ConfigField) -> None:
        """Take ``field``'s current value as the one shown, unless the user has edited this row."""
        if not self.edited:
            self.input.value = to_text(field.value) if isinstance(self.input, widgets.Text) else field.value
        self.field = field


class ConfigForm:
    def __init__(self, watch_interval_s: float = WATCH_INTERVAL_S, show_estimate: bool = True) -> None:
        """``show_estimate=False``: the estimate's line (``self.estimate.widget``) is placed by the caller (the
        dashboard shows it beside the monitor's Start)."""
        self.title = widgets.HTML()
        self.sections = {
            name: section(title, name in OPEN_SECTIONS, f"hermes-nb-section-{name}")
            for name, title in SECTION_TITLES.items()
        }
        self.locked_section, self.locked_box = section(LOCKED_TITLE, False, "hermes-nb-locked-section")
        self.locked_box.add_class("hermes-nb-locked-fields")
        self.apply_button = widgets.Button(description="Apply", button_style="primary", tooltip="Apply all edits")
        self.apply_button.add_class("hermes-nb-apply")
        self.reset_button = widgets.Button(description="Reset", tooltip="Back to the environment's defaults")
        self.reset_button.add_class("hermes-nb-reset")
        self.status = widgets.HTML()
        self.status.add_class("hermes-nb-form-status")
        buttons = widgets.HBox([self.apply_button, self.reset_button, self.status])
        self.estimate = EstimateLine(self.edits, on_shown=self._mark_fields_to_change)
        accordions = [accordion for accordion, _ in self.sections.values()]
        estimate = [self.estimate.widget] if show_estimate else []
        self.widget = widgets.VBox([self.title, *accordions, buttons, *estimate, self.locked_section])
        self.widget.add_class("hermes-nb-config-form")
        self.rows: dict[str, _FieldRow] = {}
        self.view: ConfigView | None = None
        self._file_id = session.file_id()
        # The watch thread and the kernel (a click, a select) both rebuild rows; one at a time.
        self._lock = threading.RLock()
        self._reload_callbacks: list[ReloadCallback] = []
        self._watcher = Refresher("hermes-nb-config-form", watch_interval_s, self._watch_tick)
        self.apply_button.on_click(lambda _: self.apply())
        self.reset_button.on_click(lambda _: self.reset())
        self.reload()
        self.estimate.refresh_now()  # shown at once; later changes are debounced

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        """A cell whose value is this object shows its widget (IPython asks for this bundle)."""
        self.start_watching()
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def watching(self) -> bool:
        return self._watcher.running

    def start_watching(self) -> ConfigForm:
        """Follow config changes made outside the form (a cell, another process) until ``close``."""
        self._watcher.start()
        return self

    def close(self) -> None:
        self._watcher.stop()
        self.estimate.close()

    def on_reload(self, callback: ReloadCallback) -> None:
        """Call ``callback`` when a change made outside the form was loaded (the dashboard updates its picker)."""
        self._reload_callbacks.append(callback)

    def reload(self) -> None:
        file_id = session.file_id()  # before reading: a change made while reading is seen by the next check
        view = service.config_view()
        with self._lock:
            self.load(view)
            self._file_id = file_id

    def load(self, view: ConfigView) -> None:
        """Rebuild the form from ``view`` (after a selection, an apply or a reset)."""
        with self._lock:
            self.view = view
            self._file_id = session.file_id()
            self.title.value = f"<b>Config</b> of {html.escape(view.environment or '(no environment selected)')}"
            self.rows = {field.name: _FieldRow(field) for field in field_order(view.configurable)}
            for row in self.rows.values():
                row.input.observe(self.estimate.changed, names="value")
            for name, (accordion, box) in self.sections.items():
                box.children = [row.widget for field_name, row in self.rows.items() if section_of(field_name) == name]
                accordion.set_title(0, f"{SECTION_TITLES[name]} ({len(box.children)})")
                accordion.layout.display = None if box.children else "none"
            self.locked_box.children = [locked_input(field) for field in view.locked]
            self.locked_section.set_title(0, f"{LOCKED_TITLE} ({len(view.locked)})")
        self.estimate.changed()

    def check_for_changes(self) -> bool:
        """Reload if the config changed outside the form since it was last loaded; True when it did.

        Rows the user has edited keep their text (and are still told apart from the new value by Apply).
        """
        file_id = session.file_id()
        if file_id == self._file_id:
            return False
        view = service.config_view()
        with self._lock:
            kept = self._take(view)
            self._file_id = file_id
        self.estimate.changed()
        note = f"; your unapplied edits to {', '.join(kept)} are kept" if kept else ""
        self._say(f"Reloaded: the config was changed outside this form{note}.")
        for callback in self._reload_callbacks:
            callback(view)
        return True

    def _watch_tick(self) -> bool:
        try:
            self.check_for_changes()
        except HermesNBError as exc:  # e.g. the environment's file went away: say so, keep watching
            self._say(str(exc), error=True)
        return True

    def _take(self, view: ConfigView) -> list[str]:
        """Show ``view``, keeping the user's edits; the names of the fields whose edits were kept."""
        edited = {name: row.input.value for name, row in self.rows.items() if row.edited}
        if self.view is not None and _same_shape(self.view, view):
            self.view = view
            for field in view.configurable:
                self.rows[field.name].follow(field)
            for box, locked in zip(self.locked_box.children, view.locked, strict=True):
                box.value = to_text(locked.value)
            return sorted(edited)
        self.load(view)  # other fields (another environment): rebuild, then put back what still applies
        kept = []
        for name, value in edited.items():
            row = self.rows.get(name)
            if row is not None and type(row.input.value) is type(value):
                row.input.value = value
                kept.append(name)
        return sorted(kept)

    def edits(self) -> dict[str, Any]:
        """The fields the user changed, by dotted name."""
        out: dict[str, Any] = {}
        for name, row in self.rows.items():
            changed, value = edited_value(row.input, row.field)
            if changed:
                out[name] = value
        return out

    def apply(self) -> bool:
        """Apply every edit together, or none: refusals are shown beside their fields."""
        edits = self.edits()
        for row in self.rows.values():
            row.show_error("")
        if not edits:
            self._say("No changes.")
            return True
        try:
            outcome = service.apply_checked(edits)
        except HermesNBError as exc:  # e.g. the session cannot be read: nothing applied
            self._say(f"Nothing applied: {exc}", error=True)
            return False
        if outcome.applied is None:
            return self._refused(outcome)
        self.load(outcome.applied.config)
        self._say(outcome.applied.message)
        return True

    def _refused(self, outcome: service.CheckedEdit) -> bool:
        for name, message in outcome.refused.items():
            self.rows[name].show_error(message)
        if outcome.refused:
            self._say(f"Nothing applied: {len(outcome.refused)} field(s) refused.", error=True)
        else:  # a rule across fields: shown once, for the whole form
            self._say(f"Nothing applied: {outcome.message}", error=True)
        return False

    def _mark_fields_to_change(self, estimate: RunEstimate | None) -> None:
        named = fields_named(estimate)
        for name, row in list(self.rows.items()):
            if name in named:
                row.widget.add_class(TO_CHANGE_CLASS)
                row.widget.layout.border = "1px solid #b00020"
            else:
                row.widget.remove_class(TO_CHANGE_CLASS)
                row.widget.layout.border = None

    def reset(self) -> None:
        try:
            view = service.reset_config()
        except HermesNBError as exc:
            self._say(str(exc), error=True)
            return
        self.load(view)
        self._say("Reset to the defaults.")

    def _say(self, message: str, error: bool = False) -> None:
        style = " style='color:#b00020'" if error else ""
        self.status.value = f"<span{style}>{html.escape(message)}</span>"


def _same_shape(old: ConfigView, new: ConfigView) -> bool:
    """Same environment, fields, types and bounds: only values differ, so the rows can stay as they are."""

    def shape(view: ConfigView) -> tuple[Any, ...]:
        fields = [(f.name, f.type, repr(f.constraints)) for f in view.configurable]
        return (view.environment, fields, [f.name for f in view.locked])

    return shape(old) == shape(new)
