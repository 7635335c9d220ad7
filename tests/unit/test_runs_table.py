"""The runs table, notes and deletion, on fabricated run directories (the files the supervisor and trainer write)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from run_dirs import MID, NEW, OLD, make_run, this_process, write_three_runs

from hermes_nb import api
from hermes_nb.errors import InvalidValueError, RunStateError, UnknownRunError
from hermes_nb.protocol.health import CostFigures, Finding, ProcessCost, RunCost, append_finding, write_cost
from hermes_nb.protocol.run_files import COST_FILE, HEALTH_FILE
from hermes_nb.runs.table.config_diff import value_label
from hermes_nb.system import home


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def three_runs() -> None:
    write_three_runs()


def test_rows_name_what_differs_from_the_oldest_run(three_runs: None) -> None:
    table = run(api.rl_compare_runs())
    rows = {row.run_id: row for row in table.rows}
    assert table.baseline == OLD
    assert rows[OLD].differs == {}
    assert rows[MID].differs == {"trainer.learning_rate": 3e-4}
    assert rows[NEW].differs == {"trainer.learning_rate": 3e-4, "env.group_size": 16}
    assert table.varying == ["trainer.learning_rate", "env.group_size"]


def test_labels_are_the_varying_fields_with_short_names(three_runs: None) -> None:
    labels = {row.run_id: row.label for row in run(api.rl_compare_runs()).rows}
    assert labels == {OLD: "lr=1e-4, group=8", MID: "lr=3e-4, group=8", NEW: "lr=3e-4, group=16"}


def test_a_named_baseline_is_what_differences_are_against(three_runs: None) -> None:
    rows = {row.run_id: row for row in run(api.rl_compare_runs(baseline=NEW)).rows}
    assert rows[NEW].differs == {}
    assert rows[OLD].differs == {"trainer.learning_rate": 1e-4, "env.group_size": 8}


def test_metrics_are_best_and_last_accuracy_and_reward(three_runs: None) -> None:
    row = next(r for r in run(api.rl_compare_runs()).rows if r.run_id == MID)
    assert (row.best_eval_accuracy, row.last_eval_accuracy) == (0.55, 0.50)
    assert (row.best_reward, row.last_reward) == (0.9, 0.6)
    assert (row.step, row.total_steps) == (4, 10)
    assert row.wall_s == pytest.approx(1_700_000_100.0 - 2.0)


def test_sorting_puts_the_best_first_and_unknown_last(three_runs: None) -> None:
    order = [r.run_id for r in run(api.rl_compare_runs(sort_by="best_eval")).rows]
    assert order == [NEW, MID, OLD]
    ascending = [r.run_id for r in run(api.rl_compare_runs(sort_by="best_eval", descending=False)).rows]
    assert ascending == [MID, NEW, OLD]
    assert [r.run_id for r in run(api.rl_compare_runs()).rows] == [NEW, MID, OLD]  # newest first by default


def test_the_health_column_names_each_runs_findings_errors_first(three_runs: None) -> None:
    for name, severity in (("clip_high", "warning"), ("entropy_collapse", "error")):
        finding = Finding(name=name, severity=severity, step=2, time=0.0, message="m", hint="h")
        append_finding(home.run_dir(MID) / HEALTH_FILE, finding)
    write_cost(
        home.run_dir(MID) / COST_FILE, RunCost(actual=CostFigures(processes={"trainer": ProcessCost(cpu_seconds=90)}))
    )

    table = run(api.rl_compare_runs())

    rows = {row.run_id: row for row in table.rows}
    assert (rows[MID].health_text(), rows[OLD].health_text()) == ("entropy_collapse, clip_high", "ok")
    assert (rows[MID].cpu_seconds, rows[OLD].cpu_seconds) == (90, None)
    assert "entropy_collapse, clip_high" in str(table)


def test_an_unknown_sort_column_is_refused_naming_the_columns(three_runs: None) -> None:
    with pytest.raises(InvalidValueError, match="sort_by: 'lr' is not a column; choose one of created, run"):
        run(api.rl_compare_runs(sort_by="lr"))


def test_an_unknown_run_is_refused_naming_it(three_runs: None) -> None:
    with pytest.raises(UnknownRunError, match="unknown run 'nope'"):
        run(api.rl_compare_runs(runs=["nope"]))


def test_text_form_shows_differences_and_notes(three_runs: None) -> None:
    run(api.rl_tag_run(MID, "too slow"))
    text = str(run(api.rl_compare_runs()))
    assert "lr=3e-4, group=16" in text and "too slow" in text and "baseline" in text


def test_a_note_is_stored_in_the_run_directory_and_removed_by_an_empty_one(three_runs: None) -> None:
    assert run(api.rl_tag_run(OLD, "  first try ")).note == "first try"
    assert (home.run_dir(OLD) / "note.txt").read_text(encoding="utf-8") == "first try\n"
    assert run(api.rl_tag_run(OLD, "")).note == ""
    assert not (home.run_dir(OLD) / "note.txt").exists()


def test_a_note_with_a_line_break_is_refused_and_changes_nothing(three_runs: None) -> None:
    run(api.rl_tag_run(OLD, "kept"))
    with pytest.raises(InvalidValueError, match="note: one line"):
        run(api.rl_tag_run(OLD, "two\nlines"))
    assert next(r for r in run(api.rl_compare_runs()).rows if r.run_id == OLD).note == "kept"


def test_delete_without_confirm_changes_nothing_and_lists_what_would_go(three_runs: None) -> None:
    paths = make_run("20250101-130000-dddddddddd", 1e-4, 8, 4.0)
    paths.logs["trainer"].parent.mkdir(parents=True, exist_ok=True)
    paths.logs["trainer"].write_text("log\n", encoding="utf-8")
    result = run(api.rl_delete_run(paths.run_id))
    assert not result.done and result.paths == [str(paths.run_dir), str(paths.logs["trainer"])]
    assert paths.run_dir.is_dir() and paths.logs["trainer"].is_file()


def test_delete_takes_the_run_directory_and_its_logs(three_runs: None) -> None:
    paths = make_run("20250101-130000-dddddddddd", 1e-4, 8, 4.0)
    paths.logs["trainer"].parent.mkdir(parents=True, exist_ok=True)
    paths.logs["trainer"].write_text("log\n", encoding="utf-8")
    assert run(api.rl_delete_run(paths.run_id, confirm=True)).done
    assert not paths.run_dir.exists() and not paths.logs["trainer"].exists()
    assert paths.run_id not in [r.run_id for r in run(api.rl_compare_runs()).rows]


def test_archive_moves_the_run_directory_and_its_logs_together(three_runs: None) -> None:
    paths = make_run("20250101-130000-dddddddddd", 1e-4, 8, 4.0)
    paths.logs["trainer"].parent.mkdir(parents=True, exist_ok=True)
    paths.logs["trainer"].write_text("log\n", encoding="utf-8")
    result = run(api.rl_delete_run(paths.run_id, confirm=True, archive=True))
    archived = home.archive_dir()
    assert result.archived_to == str(archived / "runs" / paths.run_id)
    assert (archived / "runs" / paths.run_id / "config.yaml").is_file()
    assert (archived / "logs" / paths.logs["trainer"].name).read_text(encoding="utf-8") == "log\n"
    assert not paths.run_dir.exists()


def test_a_live_run_is_never_deleted(three_runs: None) -> None:
    paths = make_run("20250101-130000-dddddddddd", 1e-4, 8, 4.0, status="running",
                     processes={"supervisor": this_process()})  # fmt: skip
    with pytest.raises(RunStateError, match="run 20250101-130000-dddddddddd is running: stop it first"):
        run(api.rl_delete_run(paths.run_id, confirm=True))
    assert paths.state.is_file()


@pytest.mark.parametrize(("value", "text"), [(3e-4, "3e-4"), (1e-5, "1e-5"), (0.5, "0.5"), (8, "8"), ("ppo", "ppo"),
                                             (True, "true")])  # fmt: skip
def test_values_are_labelled_short(value: Any, text: str) -> None:
    assert value_label(value) == text


def test_the_cost_column_shows_gpu_time_and_money_beside_the_estimate_where_there_are_any(three_runs: None) -> None:
    trainer = ProcessCost(cpu_seconds=90, gpu_seconds=75.0, gpu_peak_bytes=2 << 30)
    priced = RunCost(actual=CostFigures(processes={"trainer": trainer}, price_usd=1.5),
                     estimate=CostFigures(price_usd=1.25))  # fmt: skip
    write_cost(home.run_dir(MID) / COST_FILE, priced)

    rows = {row.run_id: row for row in run(api.rl_compare_runs()).rows}

    assert rows[MID].cost_text() == "1m15s GPU, $1.50 (est. $1.25)"
    assert rows[OLD].cost_text() == "–"  # a CPU run without a price: nothing, not zeros
