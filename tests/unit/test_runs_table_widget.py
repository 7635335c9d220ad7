"""``%rl_runs``' widget over fabricated runs: overlay labels are what differs, a run keeps its colour, sorting,
and deletion asks first."""

from __future__ import annotations

import ipywidgets as widgets
import pytest
from run_dirs import MID, NEW, OLD, make_run, write_three_runs

from hermes_nb.notebook.widgets.runs_table import RunsTableWidget


@pytest.fixture
def three_runs() -> None:
    write_three_runs()


def test_chosen_runs_are_overlaid_labelled_by_what_differs(three_runs: None) -> None:
    table = RunsTableWidget()
    table.select([MID, NEW])
    assert table.plot is not None
    assert [source.label for source in table.plot.plot.sources] == ["lr=3e-4, group=8", "lr=3e-4, group=16"]
    table.close()


def test_a_run_keeps_its_colour_when_runs_are_added_and_the_table_resorted(three_runs: None) -> None:
    table = RunsTableWidget()
    before = dict(table.colors)
    assert len(set(before.values())) == 3
    make_run("20250101-130000-dddddddddd", 1e-3, 8, 4.0)
    table.sort("best_eval")
    assert {run_id: table.colors[run_id] for run_id in before} == before
    assert table.colors["20250101-130000-dddddddddd"] not in before.values()
    table.close()


def test_a_header_click_sorts_and_a_second_turns_the_order_round(three_runs: None) -> None:
    table = RunsTableWidget()
    table.sort("best_eval")
    assert table.table is not None and [r.run_id for r in table.table.rows] == [NEW, MID, OLD]
    table.sort("best_eval")
    assert [r.run_id for r in table.table.rows] == [MID, NEW, OLD]
    table.close()


def test_delete_asks_first_and_then_removes_the_chosen_runs(three_runs: None) -> None:
    table = RunsTableWidget()
    table.select([OLD])
    table.ask("delete")
    assert "Delete 1 run(s)?" in table.message.value and table.confirm_button.layout.display is None
    assert table.table is not None and OLD in table.rows_by_id()
    table.confirm()
    assert OLD not in table.rows_by_id() and "deleted: " + OLD in table.message.value
    assert isinstance(table.grid, widgets.GridBox)
    table.close()
