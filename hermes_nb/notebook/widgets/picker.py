"""Environment picker: the environments with their descriptions, a filter box; choosing one selects it."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from hermes_nb.errors import HermesNBError
from hermes_nb.selection import service
from hermes_nb.selection.current import current_state
from hermes_nb.selection.discovery import EnvironmentInfo
from hermes_nb.selection.results import SelectionResult

SelectionCallback = Callable[[SelectionResult], None]
LIST_ROWS = 8
# Wide enough for the name and the start of the description's first sentence in a notebook column.
LABEL_CHARS = 72
# The list is as wide as LABEL_CHARS at the notebook's font (about 7.5 px a character) plus its label, so a
# label is cut by LABEL_CHARS with an ellipsis, never by the widget's edge; the details beside it take the rest.
LIST_LAYOUT = {"width": "760px", "flex": "0 0 auto"}


class EnvironmentPicker:
    def __init__(self) -> None:
        self.filter = widgets.Text(
            placeholder="filter by name or description", description="Filter", layout={"width": LIST_LAYOUT["width"]}
        )
        self.filter.add_class("hermes-nb-picker-filter")
        self.list = widgets.Select(options=[], rows=LIST_ROWS, description="Environment", layout=LIST_LAYOUT)
        self.list.add_class("hermes-nb-picker")
        self.details = widgets.HTML()
        self.details.add_class("hermes-nb-picker-details")
        self.status = widgets.HTML()
        self.status.add_class("hermes-nb-picker-status")
        about = widgets.VBox([self.details, self.status], layout={"flex": "1 1 auto", "margin": "0 0 0 12px"})
        self.widget = widgets.HBox([widgets.VBox([self.filter, self.list]), about])
        self.widget.add_class("hermes-nb-environment-picker")
        self.environments: list[EnvironmentInfo] = []
        self.selected: str | None = None
        self._callbacks: list[SelectionCallback] = []
        self._quiet = False  # True while options are replaced, so that is not taken for a choice
        self.filter.observe(self._on_filter, names="value")
        self.list.observe(self._on_choice, names="value")
        self.reload()

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        """A cell whose value is this object shows its widget (IPython asks for this bundle)."""
        return self.widget._repr_mimebundle_(**kwargs)

    @property
    def shown(self) -> list[str]:
        """Names of the environments the list shows now (after the filter)."""
        return [name for _, name in self.list.options]

    def on_select(self, callback: SelectionCallback) -> None:
        self._callbacks.append(callback)

    def reload(self) -> None:
        """Scan the environments again (a file written from a cell appears here)."""
        listing = service.list_environments()
        self.environments = listing.environments
        self.selected = _selector_of(self.environments, current_state().environment)
        problems = "".join(f"<br>⚠ {html.escape(f'{e.file}: {e.message}')}" for e in listing.errors)
        self.status.value = problems[4:] if problems else ""
        self._show(self.filter.value)

    def mark_selected(self, name: str | None) -> None:
        """Show ``name`` as the selection made elsewhere (a cell's rl_select_environment), selecting nothing."""
        self.selected = name
        self._show(self.filter.value)

    def select(self, name: str) -> SelectionResult | None:
        """Select ``name`` through the core, as choosing it in the list does; None when the core refused."""
        self.status.value = f"Loading {html.escape(name)} …"
        try:
            result = service.select_environment(name)
        except HermesNBError as exc:
            self.status.value = f"<span class='hermes-nb-error'>{html.escape(str(exc))}</span>"
            return None
        self.selected = name
        self.status.value = html.escape(result.message)
        for callback in self._callbacks:
            callback(result)
        return result

    def _show(self, text: str) -> None:
        needle = text.strip().lower()
        shown = [e for e in self.environments if needle in e.name.lower() or needle in e.description.lower()]
        self._quiet = True
        try:
            # A name two environments share is no choice: each is offered by its qualified name.
            self.list.options = [(_label(e), e.selector) for e in shown]
            names = [e.selector for e in shown]
            self.list.value = self.selected if self.selected in names else None
        finally:
            self._quiet = False
        self._describe(self.list.value)

    def _describe(self, name: str | None) -> None:
        info = next((e for e in self.environments if e.selector == name), None)
        if info is None:
            self.details.value = "<i>Choose an environment.</i>"
            return
        self.details.value = (
            f"<b>{html.escape(info.name)}</b> — {html.escape(info.description)}"
            f"<br><small>{html.escape(info.class_name)} in {html.escape(info.file)}, from {html.escape(info.source)}"
            "</small>"
        )

    def _on_filter(self, change: dict[str, object]) -> None:
        self._show(str(change["new"]))

    def _on_choice(self, change: dict[str, object]) -> None:
        name = change["new"]
        if self._quiet or not isinstance(name, str) or name == self.selected:
            return
        self._describe(name)
        self.select(name)


def _selector_of(environments: list[EnvironmentInfo], current: EnvironmentInfo | None) -> str | None:
    """What the list calls the selected environment: its qualified name where its name is shared."""
    if current is None:
        return None
    chosen = next((e for e in environments if (e.file, e.class_name) == (current.file, current.class_name)), None)
    return chosen.selector if chosen is not None else current.name


def _label(info: EnvironmentInfo) -> str:
    label = f"{info.name} — {info.description}" if info.description else info.name
    if info.shared:  # where it comes from first: the description may not tell two of one name apart
        label = f"{info.name} ({info.source}) — {info.description}"
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"
