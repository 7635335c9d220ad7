"""Widgets headless: set values, click buttons, check the real core's state and what the widgets show."""

from __future__ import annotations

import html
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import ipywidgets as widgets
import psutil
import pytest
from notebook_runs import append_trainer_rows, make_run, set_status

import hermes_nb.runs.service
from hermes_nb.api import rl_edit_config, rl_get_current_config, rl_select_environment
from hermes_nb.notebook import Dashboard, kernel_runs
from hermes_nb.notebook.widgets.config_form import ConfigForm
from hermes_nb.notebook.widgets.monitor import LOG_LINES, RunMonitor, format_eta
from hermes_nb.notebook.widgets.picker import EnvironmentPicker
from hermes_nb.protocol.health import Finding, append_finding
from hermes_nb.protocol.run_files import HEALTH_FILE
from hermes_nb.protocol.run_state import ProcessRecord
from hermes_nb.runs.table.results import StartResult
from hermes_nb.syncio import run_sync
from hermes_nb.system import home

RUN = "20260101-000000-aaaaaaaaaa"
FAST_S = 0.05
THREAD_NAMES = {"hermes-nb-run-monitor", "hermes-nb-live-plot", "hermes-nb-config-form"}


def refresh_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name in THREAD_NAMES]


def wait_until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


@pytest.fixture(autouse=True)
def fresh_kernel() -> Iterator[None]:
    kernel_runs.forget_started()
    yield
    kernel_runs.forget_started()


def select(name: str) -> None:
    run_sync(rl_select_environment(name))


def current_values() -> dict[str, Any]:
    return run_sync(rl_get_current_config()).values()


# ---------------------------------------------------------------- picker


def test_picker_lists_the_environments_with_descriptions() -> None:
    picker = EnvironmentPicker()
    assert {"arithmetic", "count_letters", "reverse_string", "sort_letters"} <= set(picker.shown)
    assert "hermes-nb-picker" in picker.list._dom_classes
    picker.filter.value = "revers"
    assert picker.shown == ["reverse_string"]
    assert picker.list.options[0][0].startswith("reverse_string — Reverse a string")


def test_choosing_in_the_picker_selects_the_environment_in_the_core() -> None:
    picker = EnvironmentPicker()
    chosen: list[str] = []
    picker.on_select(lambda result: chosen.append(result.environment.name))
    picker.list.value = "count_letters"
    assert run_sync(rl_get_current_config()).environment == "count_letters"
    assert chosen == ["count_letters"]
    assert "Count one letter" in picker.details.value


def test_filtering_does_not_select_anything() -> None:
    select("arithmetic")
    picker = EnvironmentPicker()
    picker.filter.value = "sort"
    picker.filter.value = ""
    assert run_sync(rl_get_current_config()).environment == "arithmetic"
    assert picker.list.value == "arithmetic"


# ---------------------------------------------------------------- config form


def test_form_has_one_input_per_field_of_the_right_kind() -> None:
    select("arithmetic")
    form = ConfigForm()
    inputs = {name: row.input for name, row in form.rows.items()}
    assert isinstance(inputs["env.group_size"], widgets.IntText)
    assert isinstance(inputs["trainer.learning_rate"], widgets.FloatText)
    assert isinstance(inputs["env.include_messages"], widgets.Checkbox)
    assert isinstance(inputs["env.operation"], widgets.Dropdown)
    assert inputs["env.operation"].label == "add"
    assert [value for _, value in inputs["env.operation"].options] == ["add", "sub", "mixed"]
    assert isinstance(inputs["trainer.torch_threads"], widgets.Text)  # int | None
    assert "≥ 2" in form.rows["env.group_size"].hint.value
    assert "hermes-nb-field-env-group_size" in inputs["env.group_size"]._dom_classes


def test_locked_fields_are_disabled_and_show_their_values() -> None:
    select("arithmetic")
    form = ConfigForm()
    locked = {box.description: box for box in form.locked_box.children}
    assert locked["env.tokenizer_name"].disabled
    assert locked["env.tokenizer_name"].value == "embedded"
    assert locked["environment"].value == "arithmetic"
    assert "env.tokenizer_name" not in form.rows


def test_apply_sends_every_edit_to_the_core_at_once() -> None:
    select("arithmetic")
    form = ConfigForm()
    form.rows["env.group_size"].input.value = 8
    form.rows["env.operation"].input.value = "sub"
    form.rows["trainer.torch_threads"].input.value = "2"
    form.apply_button.click()
    values = current_values()
    assert (values["env.group_size"], values["env.operation"], values["trainer.torch_threads"]) == (8, "sub", 2)
    assert "Updated 3 fields" in form.status.value
    assert form.rows["env.group_size"].field.value == 8  # the form now shows the applied config


def test_an_invalid_value_shows_inline_and_nothing_is_applied() -> None:
    select("arithmetic")
    form = ConfigForm()
    form.rows["env.group_size"].input.value = 8  # valid, but goes with the invalid one or not at all
    form.rows["env.digits"].input.value = 99
    form.apply_button.click()
    assert "less than or equal to 6" in form.rows["env.digits"].error.value
    assert form.rows["env.group_size"].error.value == ""
    assert "Nothing applied" in form.status.value
    assert current_values()["env.group_size"] == 16
    assert "hermes-nb-error-env-digits" in form.rows["env.digits"].error._dom_classes


def test_fixing_the_value_clears_the_error_and_applies() -> None:
    select("arithmetic")
    form = ConfigForm()
    form.rows["env.digits"].input.value = 99
    form.apply()
    form.rows["env.digits"].input.value = 3
    form.apply()
    assert form.rows["env.digits"].error.value == ""
    assert current_values()["env.digits"] == 3


def test_reset_restores_the_defaults() -> None:
    select("arithmetic")
    form = ConfigForm()
    form.rows["env.digits"].input.value = 4
    form.apply()
    form.reset_button.click()
    assert current_values()["env.digits"] == 2
    assert form.rows["env.digits"].input.value == 2


def test_form_groups_fields_by_section_with_the_most_used_first() -> None:
    select("arithmetic")
    form = ConfigForm()
    env_section, env_box = form.sections["env"]
    env_names = [child.children[0].description for child in env_box.children]
    assert env_names[:2] == ["env.total_steps", "env.group_size"]
    assert env_names.index("env.digits") < env_names.index("env.seed")  # the environment's own fields come early
    assert env_section.selected_index == 0  # open
    assert form.sections["trainer"][0].selected_index is None  # folded
    algorithm_section, algorithm_box = form.sections["algorithm"]
    algorithm_names = [child.children[0].description for child in algorithm_box.children]
    assert algorithm_names[:3] == ["trainer.loss", "trainer.loss_type", "trainer.importance_sampling_level"]
    assert "trainer.beta" in algorithm_names and algorithm_section.selected_index is None
    trainer_names = [child.children[0].description for child in form.sections["trainer"][1].children]
    assert "trainer.learning_rate" in trainer_names and not set(trainer_names) & set(algorithm_names)
    assert form.locked_section.selected_index is None
    assert all("hermes-nb-locked" in box._dom_classes for box in form.locked_box.children)
    row = form.rows["env.group_size"]
    assert row.hint.layout.width and row.error.layout.min_width  # bounds and errors get their own room


def test_a_change_made_in_a_cell_reaches_the_form_and_keeps_unapplied_edits() -> None:
    select("arithmetic")
    form = ConfigForm()
    form.rows["env.digits"].input.value = 4  # typed, not applied
    assert not form.check_for_changes()

    run_sync(rl_edit_config({"env.group_size": 8, "env.digits": 3}))  # what a cell does

    assert form.check_for_changes()
    assert form.rows["env.group_size"].input.value == 8
    assert form.rows["env.digits"].input.value == 4
    assert form.edits() == {"env.digits": 4}
    assert "env.digits" in form.status.value


def test_another_environment_selected_in_a_cell_rebuilds_the_form() -> None:
    select("arithmetic")
    form = ConfigForm()
    form.rows["env.group_size"].input.value = 6
    select("reverse_string")
    assert form.check_for_changes()
    assert form.view is not None and form.view.environment == "reverse_string"
    assert "env.digits" not in form.rows
    assert form.rows["env.group_size"].input.value == 6  # a field both environments have keeps the edit


def test_the_shown_form_follows_changes_by_itself_until_closed() -> None:
    select("arithmetic")
    form = ConfigForm(watch_interval_s=FAST_S)
    form._repr_mimebundle_()  # shown in a cell
    try:
        run_sync(rl_edit_config({"env.group_size": 12}))
        wait_until(lambda: form.rows["env.group_size"].input.value == 12)
    finally:
        form.close()
    assert refresh_threads() == []


# ---------------------------------------------------------------- run monitor


def test_monitor_without_runs_offers_start_only() -> None:
    monitor = RunMonitor()
    assert "No run yet" in monitor.status.value
    assert not monitor.start_button.disabled
    assert monitor.stop_button.disabled
    assert not monitor.refreshing


def test_monitor_shows_progress_and_stops_refreshing_when_the_run_ends() -> None:
    make_run(RUN, total_steps=10)
    append_trainer_rows(RUN, range(4))
    monitor = RunMonitor(RUN, interval_s=FAST_S)
    assert (monitor.progress.value, monitor.progress.max) == (3, 10)
    assert "running" in monitor.status.value
    assert monitor.eta.value.startswith("ETA")
    assert monitor.refreshing
    append_trainer_rows(RUN, range(4, 10))
    set_status(RUN, "completed", total_steps=10)
    wait_until(lambda: not monitor.refreshing)
    assert monitor.progress.value == 9
    assert "completed" in monitor.status.value
    assert refresh_threads() == []


def test_monitor_shows_each_health_finding_as_a_badge_with_its_step() -> None:
    make_run(RUN, total_steps=10)
    append_trainer_rows(RUN, range(4))
    finding = Finding(name="entropy_collapse", severity="error", step=3, time=time.time(), message="fell",
                      hint="lower trainer.learning_rate")  # fmt: skip
    append_finding(home.run_dir(RUN) / HEALTH_FILE, finding)
    monitor = RunMonitor(RUN, interval_s=FAST_S)
    monitor.close()
    assert "entropy_collapse @ 3" in monitor.health.value
    assert "hermes-nb-health-error" in monitor.health.value
    assert "lower trainer.learning_rate" in html.unescape(monitor.health.value)


def test_stop_button_signals_the_run_supervisor() -> None:
    supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        record = ProcessRecord(
            name="supervisor", pid=supervisor.pid, started_at=psutil.Process(supervisor.pid).create_time()
        )
        make_run(RUN, processes={"supervisor": record})
        monitor = RunMonitor(RUN, interval_s=FAST_S)
        said: list[str] = []
        monitor.message.observe(lambda change: said.append(change["new"]), names="value")
        monitor.stop_button.click()
        assert supervisor.wait(timeout=10) == -signal.SIGTERM
        assert any("Stop requested: stopping" in message for message in said)
        set_status(RUN, "stopped")  # what the supervisor writes on its way out
        wait_until(lambda: not monitor.refreshing)
        assert "stopped" in monitor.status.value or "failed" in monitor.status.value  # a fake that wrote nothing
    finally:
        if supervisor.poll() is None:
            os.kill(supervisor.pid, signal.SIGKILL)
        supervisor.wait()


def test_after_stop_the_message_says_how_the_run_ended() -> None:
    supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        record = ProcessRecord(
            name="supervisor", pid=supervisor.pid, started_at=psutil.Process(supervisor.pid).create_time()
        )
        make_run(RUN, processes={"supervisor": record})
        append_trainer_rows(RUN, range(4))
        monitor = RunMonitor(RUN, interval_s=60.0)  # refreshed by hand: the fake supervisor writes no status
        monitor.stop_button.click()
        supervisor.wait(timeout=10)
        set_status(RUN, "stopped")  # what the real supervisor writes on its way out
        assert monitor.refresh() is False
        monitor.close()
        assert "Stop requested" not in monitor.message.value
        assert "Run stopped at step 3/10" in monitor.message.value
    finally:
        if supervisor.poll() is None:
            os.kill(supervisor.pid, signal.SIGKILL)
        supervisor.wait()


def write_log(run_id: str, text: str, process: str = "trainer") -> None:
    path = home.logs_dir() / f"{process}_{run_id}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def shown_log_lines(monitor: RunMonitor) -> list[str]:
    """The text lines the log view shows, in order (its HTML holds one <pre>)."""
    pre = re.search(r"<pre[^>]*>(.*)</pre>", monitor.log.value, re.S)
    assert pre is not None, monitor.log.value
    return html.unescape(pre.group(1)).split("\n")


def test_the_log_tail_shows_the_newest_lines_kept_in_view() -> None:
    make_run(RUN, status="completed")
    write_log(RUN, "".join(f"line {i}\n" for i in range(100)))
    monitor = RunMonitor(RUN)
    shown = shown_log_lines(monitor)
    assert shown[-1] == "line 99" and len(shown) == LOG_LINES
    assert "column-reverse" in monitor.log.value  # the box starts scrolled to its end, where the newest line is


def test_the_log_tail_shows_a_progress_bar_as_its_last_state() -> None:
    make_run(RUN, status="completed")
    bar = "".join(f"\rsteps: {p:3d}%|" for p in range(0, 101, 5))
    write_log(RUN, f"loading\n{bar}\nstep 1 done\n")
    monitor = RunMonitor(RUN)
    assert shown_log_lines(monitor) == ["loading", "steps: 100%|", "step 1 done"]


def test_start_button_starts_a_run_and_follows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_start(**overrides: Any) -> StartResult:  # launching processes is the e2e tests' job
        make_run(RUN, total_steps=5)
        return StartResult(
            run_id=RUN, status="starting", environment="arithmetic", run_dir="", logs={},
            wandb_project="p", wandb_run_name="r", total_steps=5,
        )  # fmt: skip

    monkeypatch.setattr(hermes_nb.runs.service, "start_training", fake_start)
    monitor = RunMonitor(interval_s=FAST_S)
    started: list[str] = []
    monitor.on_start(lambda result: started.append(result.run_id))
    monitor.start_button.click()
    assert started == [RUN] and monitor.run_id == RUN
    assert kernel_runs.default_run() == RUN
    assert monitor.start_button.disabled and not monitor.stop_button.disabled
    monitor.close()
    assert refresh_threads() == []


def test_start_without_an_environment_says_so() -> None:
    monitor = RunMonitor()
    monitor.start_button.click()
    assert "select an environment first" in monitor.message.value


@pytest.mark.parametrize("make", [EnvironmentPicker, ConfigForm, RunMonitor])
def test_a_widget_as_a_cells_value_shows_as_its_widget(make: Any) -> None:
    part = make()

    bundle = part._repr_mimebundle_()

    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == part.widget.model_id
    if hasattr(part, "close"):  # a shown form watches the config, a shown monitor its run
        part.close()
    assert refresh_threads() == []


def test_format_eta() -> None:
    assert format_eta(None) == "ETA –"
    assert format_eta(75) == "ETA 1m15s"
    assert format_eta(3 * 3600 + 120) == "ETA 3h02m00s"


# ---------------------------------------------------------------- dashboard


def test_dashboard_choice_reloads_the_form_and_close_leaves_no_thread() -> None:
    make_run(RUN)
    board = Dashboard(refresh_interval=FAST_S, status_interval=FAST_S)
    try:
        board.picker.list.value = "reverse_string"
        assert board.form.view is not None and board.form.view.environment == "reverse_string"
        assert board.plot is not None and board.plot.running
        assert board.plot_box.children == (board.plot.widget,)
    finally:
        board.close()
    assert refresh_threads() == []


def test_dashboard_picker_follows_a_selection_made_in_a_cell() -> None:
    select("arithmetic")
    board = Dashboard(refresh_interval=FAST_S, status_interval=FAST_S)
    try:
        select("sort_letters")
        wait_until(lambda: board.picker.list.value == "sort_letters")
        assert board.form.view is not None and board.form.view.environment == "sort_letters"
    finally:
        board.close()
    assert refresh_threads() == []


def test_dashboard_plot_reads_the_step_the_monitor_shows() -> None:
    make_run(RUN, total_steps=10)
    append_trainer_rows(RUN, range(2))
    board = Dashboard(RUN, refresh_interval=60.0, status_interval=60.0)  # no timed refresh during the test
    try:
        append_trainer_rows(RUN, range(2, 5))
        board.monitor.refresh()
        assert board.monitor.progress.value == 4
        assert board.plot is not None and board.plot.plot.latest_step() == 4
    finally:
        board.close()
