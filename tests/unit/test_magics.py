"""The %rl_* magics through a real IPython shell, against the real core on a temporary home."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from notebook_runs import append_trainer_rows, make_run

import hermes_nb.model_test.runner
import hermes_nb.runs.commands
from hermes_nb.api import rl_get_current_config
from hermes_nb.notebook import kernel_runs
from hermes_nb.notebook.magics import HermesNB
from hermes_nb.notebook.widgets.live_plot import LivePlot
from hermes_nb.protocol.run_state import ProcessRecord
from hermes_nb.runs.commands import rl_tail_logs
from hermes_nb.runs.estimate import RunEstimate
from hermes_nb.runs.table.results import LogTail, RunStatus, StartResult
from hermes_nb.selection.results import ConfigView, EnvironmentList, SelectionResult
from hermes_nb.syncio import run_sync
from hermes_nb.system import home

OLDER = "20260101-000000-aaaaaaaaaa"
NEWER = "20260102-000000-bbbbbbbbbb"


@pytest.fixture(scope="module")
def shell() -> InteractiveShell:
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "hermes_nb")
    return ip


@pytest.fixture
def ip(shell: InteractiveShell) -> Iterator[InteractiveShell]:
    """The shared shell with a fresh kernel's state: no run started here, default options."""
    kernel_runs.forget_started()
    magics = magics_of(shell)
    yield shell
    magics.home = ""
    magics.refresh_interval = HermesNB.refresh_interval.default_value
    kernel_runs.forget_started()


def magics_of(shell: InteractiveShell) -> HermesNB:
    return next(c for c in shell.configurables if isinstance(c, HermesNB))


def line(ip: InteractiveShell, text: str) -> Any:
    name, _, rest = text.partition(" ")
    return ip.run_line_magic(name, rest)


def test_rl_list_shows_the_shipped_environments(ip: InteractiveShell) -> None:
    result = line(ip, "rl_list")
    assert isinstance(result, EnvironmentList)
    assert {"arithmetic", "reverse_string"} <= {env.name for env in result.environments}
    assert "<table>" in result._repr_html_()


def test_rl_select_then_rl_config_shows_the_environment(ip: InteractiveShell) -> None:
    selected = line(ip, "rl_select arithmetic")
    assert isinstance(selected, SelectionResult)
    view = line(ip, "rl_config")
    assert isinstance(view, ConfigView)
    assert view.environment == "arithmetic"
    assert "env.digits" in view.values()


def test_rl_edit_applies_every_assignment(ip: InteractiveShell) -> None:
    line(ip, "rl_select arithmetic")
    line(ip, "rl_edit group_size=8 trainer.learning_rate=1e-4 operation=mixed")
    values = run_sync(rl_get_current_config()).values()
    assert values["env.group_size"] == 8
    assert values["trainer.learning_rate"] == pytest.approx(1e-4)
    assert values["env.operation"] == "mixed"


def test_invalid_edit_is_one_line_without_traceback_and_changes_nothing(
    ip: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    line(ip, "rl_select arithmetic")
    result = ip.run_cell("%rl_edit group_size=4 digits=99")
    assert isinstance(result.error_in_exec, UsageError)
    err = capsys.readouterr().err.strip()
    assert err.startswith("UsageError:") and "env.digits" in err
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert run_sync(rl_get_current_config()).values()["env.group_size"] == 16


def test_assignment_without_equals_is_a_usage_error(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="field=value"):
        line(ip, "rl_edit group_size")


def test_unknown_environment_is_a_usage_error_naming_it(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError, match=r"unknown environment 'aritmetic'.*arithmetic"):
        line(ip, "rl_select aritmetic")


def test_magic_help_documents_its_arguments(ip: InteractiveShell) -> None:
    with capture_output() as captured:
        ip.run_cell("%rl_logs?")
    text = captured.stdout + "".join(str(o.data.get("text/plain", "")) for o in captured.outputs)
    assert "--process" in text and "-n" in text


def test_config_home_sets_hermes_nb_home(ip: InteractiveShell, tmp_path: Path) -> None:
    ip.run_line_magic("config", f"HermesNB.home = '{tmp_path / 'rl'}'")
    assert os.environ["HERMES_NB_HOME"] == str(tmp_path / "rl")
    assert home.home_dir() == tmp_path / "rl"


def test_config_refresh_interval_reaches_the_live_plot(ip: InteractiveShell) -> None:
    make_run(NEWER)
    ip.run_line_magic("config", "HermesNB.refresh_interval = 0.5")
    plot = line(ip, f"rl_watch {NEWER}")
    assert plot._refresher._interval_s == 0.5


def test_status_without_any_run_is_a_usage_error(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="no runs yet"):
        line(ip, "rl_status")


def test_run_defaults_to_the_newest_run_then_the_one_started_here(ip: InteractiveShell) -> None:
    make_run(OLDER)
    make_run(NEWER)
    assert line(ip, "rl_status").run_id == NEWER
    kernel_runs.remember_started(OLDER)
    status = line(ip, "rl_status")
    assert isinstance(status, RunStatus)
    assert status.run_id == OLDER


def test_a_fresh_kernel_defaults_to_the_newest_run_still_going_not_a_newer_ended_one(ip: InteractiveShell) -> None:
    # The "supervisor" is this test process: alive, so its run is still going, as after a kernel restart.
    me = psutil.Process()
    alive = ProcessRecord(name="supervisor", pid=me.pid, started_at=me.create_time())
    gone = ProcessRecord(name="supervisor", pid=me.pid, started_at=me.create_time() - 3600)
    make_run(OLDER, "running", processes={"supervisor": alive})
    make_run(NEWER, "stopped")
    make_run("20260103-000000-cccccccccc", "running", processes={"supervisor": gone})

    assert line(ip, "rl_status").run_id == OLDER
    assert line(ip, "rl_watch").plot.sources[0].label == OLDER


def test_rl_logs_passes_process_and_line_count(ip: InteractiveShell) -> None:
    make_run(NEWER)
    log = home.logs_dir() / f"env_{NEWER}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(f"line {i}\n" for i in range(10)), encoding="utf-8")
    tail = line(ip, f"rl_logs {NEWER} --process env -n 3")
    assert isinstance(tail, LogTail)
    assert tail.lines == ["line 7", "line 8", "line 9"]


def test_rl_start_passes_overrides_and_becomes_the_default_run(
    ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_run(NEWER)  # newest in the home, but not the one started here
    make_run(OLDER)
    calls: list[dict[str, Any]] = []

    async def fake_start(**overrides: Any) -> StartResult:  # launching processes is the e2e tests' job
        calls.append(overrides)
        return StartResult(
            run_id=OLDER, status="starting", environment="arithmetic", run_dir="", logs={},
            wandb_project="p", wandb_run_name="r", total_steps=5,
        )  # fmt: skip

    monkeypatch.setattr(hermes_nb.runs.commands, "rl_start_training", fake_start)
    line(ip, "rl_start total_steps=5 trainer.learning_rate=1e-3")
    assert calls == [{"total_steps": "5", "trainer.learning_rate": "1e-3"}]
    assert line(ip, "rl_status").run_id == OLDER


def test_rl_estimate_passes_overrides_and_shows_the_estimate(ip: InteractiveShell) -> None:
    line(ip, "rl_select arithmetic")
    result = line(ip, "rl_estimate total_steps=7 group_size=8")
    assert isinstance(result, RunEstimate)
    assert result.total_steps == 7 and result.fits
    assert run_sync(rl_get_current_config()).values()["env.total_steps"] != 7  # an estimate saves nothing


def test_rl_watch_plots_the_default_run(ip: InteractiveShell) -> None:
    make_run(NEWER)
    append_trainer_rows(NEWER, range(4))
    plot = line(ip, "rl_watch --smoothing 0.5")
    assert isinstance(plot, LivePlot)
    assert plot.plot.latest_step() == 3
    assert not plot.running  # a returned plot starts when it is displayed


def test_rl_watch_panels_put_the_loss_in_the_picture(ip: InteractiveShell) -> None:
    make_run(NEWER)
    append_trainer_rows(NEWER, range(4))
    plot = line(ip, f"rl_watch {NEWER} --panels reward,eval,length,loss")
    assert [ax.get_title() for ax in plot.plot.figure.figure.axes][-1] == "Loss"


def test_rl_watch_with_an_unknown_panel_is_a_usage_error_naming_the_choices(ip: InteractiveShell) -> None:
    make_run(NEWER)
    with pytest.raises(UsageError, match="panels must be 4 names of: reward, eval"):
        line(ip, f"rl_watch {NEWER} --panels reward,eval,length,los")


def test_rl_watch_of_an_unknown_run_is_a_usage_error(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="run 'nope' not found"):
        line(ip, "rl_watch nope")


def test_rl_test_parses_models_for_the_core(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    async def fake_test(**kwargs: Any) -> dict[str, Any]:  # sampling needs a model: the e2e tests' job
        calls.append(kwargs)
        return kwargs

    monkeypatch.setattr(hermes_nb.model_test.runner, "rl_test_inference", fake_test)
    line(ip, "rl_test --steps 2 --group-size 4 --models a,b")
    assert calls == [{"num_steps": 2, "group_size": 4, "models": ["a", "b"]}]


def test_rl_test_leaves_options_not_given_to_the_core(ip: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    async def fake_test(**kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs)
        return kwargs

    monkeypatch.setattr(hermes_nb.model_test.runner, "rl_test_inference", fake_test)
    line(ip, "rl_test")
    assert calls == [{"models": None}]


def test_rl_logs_without_options_shows_what_rl_tail_logs_shows(ip: InteractiveShell) -> None:
    make_run(NEWER)
    log = home.logs_dir() / f"trainer_{NEWER}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(f"line {i}\n" for i in range(500)), encoding="utf-8")
    assert line(ip, "rl_logs") == run_sync(rl_tail_logs(NEWER))


def test_extra_arguments_to_a_no_argument_magic_are_refused(ip: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="takes no arguments"):
        line(ip, "rl_config everything")
