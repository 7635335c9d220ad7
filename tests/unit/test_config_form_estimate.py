"""The pre-run estimate in the config form, with the widgets' real objects: shown at once, estimated again once a
burst of changes stops, and a run that cannot fit named with the fields to change, as Start then says too."""

from __future__ import annotations

from typing import Any

import pytest

import hermes_nb.runs.service
from hermes_nb.api import rl_select_environment
from hermes_nb.notebook import Dashboard
from hermes_nb.notebook.widgets.config_form import TO_CHANGE_CLASS, ConfigForm
from hermes_nb.notebook.widgets.monitor import RunMonitor
from hermes_nb.runs import estimate
from hermes_nb.runs.estimate import RunEstimate
from hermes_nb.syncio import run_sync
from hermes_nb.system import home, processes

MIB = 1 << 20


def estimated(form: ConfigForm) -> bool:
    """Wait (10 s at most) until no change waits to be estimated; True when none does."""
    processes.wait_while(lambda: form.estimate.pending, 10.0, poll_seconds=0.01)
    return not form.estimate.pending


@pytest.fixture
def form() -> Any:
    run_sync(rl_select_environment("arithmetic"))
    shown = ConfigForm()
    yield shown
    shown.close()


@pytest.fixture
def little_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with 1 MiB free, where no run fits (this machine has more: what cannot run here)."""
    monkeypatch.setattr(estimate, "device_memory", lambda device: (1 * MIB, 1024 * MIB))


def test_the_form_shows_memory_time_tokens_and_price_at_once(form: ConfigForm) -> None:
    shown = form.estimate.widget.value
    assert isinstance(form.estimate.last, RunEstimate) and form.estimate.last.fits
    for part in ("trainer:", "sampler:", "free: fits", "s/step", "tokens:", "price: none"):
        assert part in shown, part
    assert form.estimate.widget in form.widget.children


def test_a_burst_of_changes_is_estimated_once_when_it_stops(form: ConfigForm, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    real = hermes_nb.runs.service.estimate_run

    def counted(**overrides: Any) -> RunEstimate:
        calls.append(overrides)
        return real(**overrides)

    monkeypatch.setattr(hermes_nb.runs.service, "estimate_run", counted)
    for steps in (1, 12, 123, 7):  # typing "7" after clearing: four changes of one field
        form.rows["env.total_steps"].input.value = steps
    assert estimated(form)
    assert calls == [{"env.total_steps": 7}]
    assert form.estimate.last is not None and form.estimate.last.total_steps == 7
    assert "unapplied edits to env.total_steps: Apply before Start" in form.estimate.widget.value


def test_a_value_the_config_refuses_shows_why_there_is_no_estimate(form: ConfigForm) -> None:
    form.rows["env.digits"].input.value = 99
    assert estimated(form) and form.estimate.last is None
    assert "No estimate:" in form.estimate.widget.value and "less than or equal to 6" in form.estimate.widget.value


def test_a_run_that_cannot_fit_marks_the_fields_to_change_and_start_says_why(little_memory: None) -> None:
    run_sync(rl_select_environment("arithmetic"))
    form = ConfigForm()
    try:
        assert form.estimate.last is not None and not form.estimate.last.fits
        assert "DOES NOT FIT" in form.estimate.widget.value and "to make it fit, change:" in form.estimate.widget.value
        marked = {name for name, row in form.rows.items() if TO_CHANGE_CLASS in row.widget._dom_classes}
        assert {"env.max_token_length", "trainer.gradient_checkpointing"} <= marked
        assert "env.total_steps" not in marked
        monitor = RunMonitor()
        monitor.start_button.click()
        assert "trainer.gradient_checkpointing" in monitor.message.value
        assert not home.runs_dir().exists() or not any(home.runs_dir().iterdir())
    finally:
        form.close()


def test_the_dashboard_shows_the_estimate_under_start() -> None:
    run_sync(rl_select_environment("arithmetic"))
    board = Dashboard(refresh_interval=60.0, status_interval=60.0)
    try:
        assert board.form.estimate.widget in board.monitor.widget.children
        assert board.form.estimate.widget not in board.form.widget.children
        assert "s/step" in board.form.estimate.widget.value
    finally:
        board.close()
