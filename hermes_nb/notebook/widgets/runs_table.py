"""``%rl_runs``: the runs table (``rl_compare_runs``) as a widget.

Column headers sort (a second click turns the order round); a checkbox per row overlays the chosen runs in one
live plot (``LivePlot``, as ``%rl_watch`` makes it) whose legend names each run by what differs (``lr=3e-4,
group=8``). A run keeps its colour for the widget's life: the first colour not yet given, in the order the runs
were created, so refreshes and new runs never repaint the others. Delete and archive act on the chosen runs after
a confirmation; a live run is refused by the core, and the refusal shown in place. The widget holds no logic of
its own: every answer is the core's.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

import ipywidgets as widgets

from hermes_nb.errors import HermesNBError
from hermes_nb.notebook.widgets.live_plot import LivePlot
from hermes_nb.notebook.widgets.refresher import Refresher
from hermes_nb.plotting.sources import RunFilesSource
from hermes_nb.protocol.run_state import TERMINAL_STATUSES
from hermes_nb.runs import service
from hermes_nb.runs.table.rows import HEADERS, RunRow, RunsTable, row_cells

# Header -> the sort column of rl_compare_runs; "differs" is not sortable (it is text made for reading).
_SORT_OF_HEADER = {
    "run": "run", "status": "status", "environment": "environment", "sweep": "sweep", "best eval": "best_eval",
    "last eval": "last_eval", "best reward": "best_reward", "last reward": "last_reward", "steps": "steps",
    "wall": "wall", "note": "note",
}  # fmt: skip
# matplotlib's default cycle, by name: the plot draws "C3" in the same colour the swatch shows.
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
            "#17becf"]  # fmt: skip
# A live run's row changes every step; a finished table does not change, so refreshing stops.
REFRESH_INTERVAL_S = 2.0


class RunsTableWidget(widgets.VBox):
    def __init__(self, sweep: str | None = None, interval_s: float = REFRESH_INTERVAL_S) -> None:
        self.sweep = sweep
        self.sort_by = "created"
        self.descending: bool | None = None
        self.selected: list[str] = []
        self.colors: dict[str, str] = {}
        self.table: RunsTable | None = None
        self.plot: LivePlot | None = None
        self._pending_action: str | None = None
        self.grid = widgets.GridBox(layout=widgets.Layout(grid_gap="2px 10px"))
        self.message = widgets.HTML()
        self.refresh_button = widgets.Button(description="refresh", layout=widgets.Layout(width="90px"))
        self.delete_button = widgets.Button(description="delete", button_style="danger",
                                            layout=widgets.Layout(width="90px"))  # fmt: skip
        self.archive_button = widgets.Button(description="archive", layout=widgets.Layout(width="90px"))
        self.confirm_button = widgets.Button(description="confirm", button_style="danger",
                                             layout=widgets.Layout(width="90px", display="none"))  # fmt: skip
        self.cancel_button = widgets.Button(description="cancel", layout=widgets.Layout(width="90px", display="none"))
        self.refresh_button.on_click(lambda _: self.refresh(force=True))
        self.delete_button.on_click(lambda _: self.ask("delete"))
        self.archive_button.on_click(lambda _: self.ask("archive"))
        self.confirm_button.on_click(lambda _: self.confirm())
        self.cancel_button.on_click(lambda _: self.cancel())
        self.plot_box = widgets.VBox()
        buttons = [self.refresh_button, self.delete_button, self.archive_button, self.confirm_button,
                   self.cancel_button]  # fmt: skip
        super().__init__([widgets.HBox(buttons), self.message, self.grid, self.plot_box])
        self.add_class("hermes-nb-runs-table")
        self._refresher = Refresher("hermes-nb-runs-table", interval_s, self._tick)
        self.refresh(force=True)

    # ---------------------------------------------------------------- reading

    def refresh(self, force: bool = False) -> bool:
        """Ask the core again; redraw when the table changed (or ``force``). True when redrawn."""
        try:
            table = service.compare_runs(sort_by=self.sort_by, descending=self.descending, sweep=self.sweep)
        except HermesNBError as exc:
            self.message.value = f"<span style='color:#a00'>{html.escape(str(exc))}</span>"
            return False
        if not force and self.table is not None and table.rows == self.table.rows:
            return False
        self.table = table
        self._assign_colors(sorted(table.rows, key=lambda r: (r.created_at, r.run_id)))
        self.selected = [run_id for run_id in self.selected if run_id in self.rows_by_id()]
        self._draw()
        if any(row.status not in TERMINAL_STATUSES for row in table.rows):
            self._refresher.start()
        return True

    def rows_by_id(self) -> dict[str, RunRow]:
        return {row.run_id: row for row in (self.table.rows if self.table else [])}

    def _tick(self) -> bool:
        self.refresh()
        return any(row.status not in TERMINAL_STATUSES for row in self.rows_by_id().values())

    def _assign_colors(self, rows: Iterable[RunRow]) -> None:
        for row in rows:
            if row.run_id not in self.colors:
                used = set(self.colors.values())
                free = [c for c in _PALETTE if c not in used]
                self.colors[row.run_id] = free[0] if free else _PALETTE[len(self.colors) % len(_PALETTE)]

    # ---------------------------------------------------------------- drawing

    def _draw(self) -> None:
        assert self.table is not None
        header = [widgets.HTML("")] + [self._header(name) for name in HEADERS]
        cells: list[widgets.Widget] = list(header)
        for row in self.table.rows:
            box = widgets.Checkbox(value=row.run_id in self.selected, indent=False,
                                   layout=widgets.Layout(width="24px"))  # fmt: skip
            box.observe(lambda change, run_id=row.run_id: self.choose(run_id, change["new"]), names="value")
            swatch = f"<span style='color:{self.colors[row.run_id]}'>■</span> "
            values = row_cells(row)
            cells.append(box)
            cells.append(widgets.HTML(swatch + html.escape(values[0])))
            cells.extend(widgets.HTML(html.escape(value)) for value in values[1:])
        self.grid.layout.grid_template_columns = f"30px repeat({len(HEADERS)}, auto)"
        self.grid.children = tuple(cells)
        if not self.table.rows:
            self.message.value = "No runs yet: start one with %rl_start or %rl_sweep."

    def _header(self, name: str) -> widgets.Widget:
        column = _SORT_OF_HEADER.get(name)
        if column is None:
            return widgets.HTML(f"<b>{html.escape(name)}</b>")
        arrow = (" ▼" if self.table and self.table.descending else " ▲") if column == self.sort_by else ""
        button = widgets.Button(description=name + arrow, layout=widgets.Layout(width="auto"))
        button.on_click(lambda _: self.sort(column))
        return button

    def sort(self, column: str) -> None:
        """Sort by ``column``; the same column again turns the order round."""
        if column == self.sort_by and self.table is not None:
            self.descending = not self.table.descending
        else:
            self.sort_by, self.descending = column, None
        self.refresh(force=True)

    # ---------------------------------------------------------------- the overlay

    def choose(self, run_id: str, chosen: bool) -> None:
        if chosen and run_id not in self.selected:
            self.selected.append(run_id)
        elif not chosen and run_id in self.selected:
            self.selected.remove(run_id)
        self.overlay()

    def select(self, run_ids: Iterable[str]) -> None:
        """Choose these runs (what ticking their boxes does) and overlay them."""
        self.selected = [run_id for run_id in run_ids if run_id in self.rows_by_id()]
        self._draw()
        self.overlay()

    def labels(self) -> dict[str, str]:
        """Chosen run id -> its legend label: what differs, made unique with the run id where two runs agree."""
        rows = self.rows_by_id()
        labels = {run_id: rows[run_id].label for run_id in self.selected}
        counts = list(labels.values())
        return {run_id: (lab if counts.count(lab) == 1 else f"{lab} ({run_id})") for run_id, lab in labels.items()}

    def overlay(self) -> None:
        if self.plot is not None:
            self.plot.close()
            self.plot = None
        if not self.selected:
            self.plot_box.children = ()
            return
        labels = self.labels()
        sources = [RunFilesSource(run_id, label=labels[run_id]) for run_id in self.selected]
        colors = {labels[run_id]: self.colors[run_id] for run_id in self.selected}
        self.plot = LivePlot(sources, colors=colors)
        self.plot_box.children = (self.plot.widget,)
        self.plot.start()

    # ---------------------------------------------------------------- delete, archive

    def ask(self, action: str) -> None:
        if not self.selected:
            self.message.value = f"Tick the runs to {action} first."
            return
        self._pending_action = action
        names = ", ".join(self.selected)
        self.message.value = f"<b>{action.capitalize()} {len(self.selected)} run(s)?</b> {html.escape(names)}"
        self.confirm_button.layout.display = self.cancel_button.layout.display = None

    def cancel(self) -> None:
        self._pending_action = None
        self.confirm_button.layout.display = self.cancel_button.layout.display = "none"
        self.message.value = ""

    def confirm(self) -> None:
        action, archive = self._pending_action, self._pending_action == "archive"
        self.cancel()
        if action is None:
            return
        if self.plot is not None:
            self.plot.close()
        done, refused = [], []
        for run_id in list(self.selected):
            try:
                service.delete_run(run_id, confirm=True, archive=archive)
                done.append(run_id)
            except HermesNBError as exc:
                refused.append(str(exc))
        self.selected = [run_id for run_id in self.selected if run_id not in done]
        text = f"{action}d: {', '.join(done)}" if done else ""
        self.message.value = html.escape(text) + "".join(
            f"<br><span style='color:#a00'>{html.escape(r)}</span>" for r in refused
        )
        self.refresh(force=True)
        self.overlay()

    def close(self) -> None:
        self._refresher.stop()
        if self.plot is not None:
            self.plot.close()
        super().close()


def runs_table(sweep: str | None = None) -> RunsTableWidget:
    """``%rl_runs``' core: the runs table widget (every run, or ``sweep``'s)."""
    return RunsTableWidget(sweep=sweep)
