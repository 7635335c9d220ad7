"""The hermes-nb command line: real processes sharing the session with this one."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from core_env_files import SIMPLE_ENV, write_env
from run_dirs import FINISHED_ID, OTHER_ID, TRAINER_ROWS, this_process, write_finished_run, write_rows, write_state

from hermes_nb import api
from hermes_nb.cli import EXIT_RUN_FAILED, build_parser, follow_run, main, print_started
from hermes_nb.model_test import runner
from hermes_nb.protocol.health import CostFigures, Finding, RunCost, append_finding, write_cost
from hermes_nb.runs.table.results import StartResult
from hermes_nb.system import home

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNNING_ID = "20250102-090000-hjkmnpqrst"
Runner = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def envs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "envs"
    write_env(directory, "simple.py", SIMPLE_ENV)
    monkeypatch.setenv("HERMES_NB_ENV_PATH", str(directory))
    return directory


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "hermes_nb.cli", *args], capture_output=True, text=True, env=env, timeout=60
    )


def test_list_select_edit_config_across_processes(envs: Path) -> None:
    listed = cli("list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "simple" in [e["name"] for e in json.loads(listed.stdout)["environments"]]
    assert cli("select", "simple").returncode == 0
    edited = cli("edit", "group_size=4", "trainer.learning_rate=1e-4")
    assert edited.returncode == 0, edited.stderr
    assert "Updated 2 fields" in edited.stdout
    shown = json.loads(cli("config", "--json").stdout)
    values = {f["name"]: f["current_value"] for f in shown["configurable_fields"]}
    assert (values["env.group_size"], values["trainer.learning_rate"]) == (4, 1e-4)
    # The kernel-side API sees what the other process did.
    view = asyncio.run(api.rl_get_current_config())
    assert view.environment == "simple" and view.values()["env.group_size"] == 4


def test_an_edit_in_this_process_is_seen_by_the_cli(envs: Path) -> None:
    asyncio.run(api.rl_select_environment("simple"))
    asyncio.run(api.rl_edit_config("digits", 6))
    shown = json.loads(cli("config", "--json").stdout)
    assert {f["name"]: f["current_value"] for f in shown["configurable_fields"]}["env.digits"] == 6


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("select", "nosuch"), "unknown environment 'nosuch'"),
        (("edit", "group_size"), "expected field=value"),
        (("edit", "trainer.learning_rate=-1"), "trainer.learning_rate: Input should be greater than 0"),
        (("edit", "wandb.entity=me"), "wandb.entity is locked"),
        (("load", "/no/such/file.yaml"), "cannot be read"),
    ],
)
def test_user_errors_exit_2_with_one_line_and_no_traceback(envs: Path, args: tuple[str, ...], expected: str) -> None:
    result = cli(*args)
    assert result.returncode == 2
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_load_reset_and_help(envs: Path) -> None:
    assert cli("select", "simple").returncode == 0
    loaded = cli("load", "configs/quick_test.yaml", "--json")
    assert json.loads(loaded.stdout)["changed"]["env.group_size"] == 4
    reset = json.loads(cli("reset", "--json").stdout)
    assert {f["name"]: f["current_value"] for f in reset["configurable_fields"]}["env.group_size"] == 8
    helped = cli("--help")
    assert helped.returncode == 0 and "select" in helped.stdout


# ---- the run lifecycle commands, on fabricated run directories -------------------------------------------------
# They only read files, so most run in this process (``main()``, as the console script calls it); the first runs
# the real command line once to show the same from outside.
@pytest.fixture
def here(capsys: pytest.CaptureFixture[str]) -> Runner:
    def run_main(*args: str) -> subprocess.CompletedProcess[str]:
        code = main(list(args))
        out = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out.out, out.err)

    return run_main


def test_an_unknown_run_exits_2_from_the_real_command_line() -> None:
    write_finished_run()
    result = cli("status", "20240101-000000-nosuchrunx")
    assert result.returncode == 2 and FINISHED_ID in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["status", "stop", "results", "logs"])
def test_an_unknown_run_exits_2_with_one_line_listing_the_known_runs(command: str, here: Runner) -> None:
    write_finished_run()
    write_state(OTHER_ID, "stopped")
    result = here(command, "20240101-000000-nosuchrunx")
    assert result.returncode == 2
    assert result.stderr.startswith(f"hermes-nb {command}: unknown run '20240101-000000-nosuchrunx'")
    assert FINISHED_ID in result.stderr and OTHER_ID in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_runs_on_an_empty_home(here: Runner) -> None:
    text = here("runs")
    assert (text.returncode, text.stdout.strip()) == (0, "0 run(s):")
    assert json.loads(here("runs", "--json").stdout) == {"runs": [], "count": 0}


def test_runs_lists_runs_newest_first(here: Runner) -> None:
    write_state(OTHER_ID, "stopped")
    write_finished_run()
    listed = json.loads(here("runs", "--json").stdout)
    assert [(r["run_id"], r["status"], r["step"]) for r in listed["runs"]] == [
        (FINISHED_ID, "completed", 4),
        (OTHER_ID, "stopped", 0),
    ]


def test_status_of_a_finished_run(here: Runner) -> None:
    write_finished_run()
    text = here("status", FINISHED_ID)
    assert text.returncode == 0, text.stderr
    assert f"Run {FINISHED_ID} (arithmetic): completed" in text.stdout
    assert "step 4/4" in text.stdout and "eval 50.0%" in text.stdout
    data = json.loads(here("status", "--json").stdout)  # no id: the newest run
    assert (data["run_id"], data["progress"], data["metrics"]["reward_mean"]) == (FINISHED_ID, "4/4", 0.6)


def test_status_prints_the_runs_health_findings_and_cost(here: Runner) -> None:
    paths = write_finished_run()
    finding = Finding(name="entropy_collapse", severity="error", step=3, time=0.0, message="entropy fell",
                      hint="lower trainer.learning_rate")  # fmt: skip
    append_finding(paths.health, finding)
    write_cost(paths.cost, RunCost(actual=CostFigures(wall_seconds={"train": 42.0}), final=True))
    text = here("status", FINISHED_ID).stdout
    assert "health: error entropy_collapse from step 3: entropy fell (lower trainer.learning_rate)" in text
    assert "cost: train 42 s" in text
    data = json.loads(here("status", "--json").stdout)
    assert [f["name"] for f in data["health"]] == ["entropy_collapse"]


def test_results_of_a_finished_run(here: Runner) -> None:
    paths = write_finished_run()
    data = json.loads(here("results", FINISHED_ID, "--json").stdout)
    assert data["final_weights_path"] == str(paths.checkpoints_dir / "step_4")
    assert data["best_metrics"]["train/reward_mean"] == 0.9
    assert len(data["history"]) == 4
    assert "final weights: " + str(paths.checkpoints_dir / "step_4") in here("results").stdout


def test_logs_of_a_finished_run(here: Runner) -> None:
    write_finished_run()
    tail = here("logs", FINISHED_ID, "-n", "2")
    assert tail.returncode == 0, tail.stderr
    assert tail.stdout.splitlines()[1:] == ["trainer line 99", "trainer line 100"]
    data = json.loads(here("logs", "--process", "trainer", "-n", "1", "--json").stdout)
    assert data["lines"] == ["trainer line 100"]
    refused = here("logs", "--process", "worker")
    assert refused.returncode == 2 and "choose one of api, trainer, env, supervisor" in refused.stderr


def test_logs_without_options_shows_what_rl_tail_logs_shows(here: Runner) -> None:
    write_finished_run()
    shown = json.loads(here("logs", FINISHED_ID, "--json").stdout)
    assert shown == asyncio.run(api.rl_tail_logs(FINISHED_ID)).to_dict()


def test_test_leaves_options_not_given_to_the_core(here: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, object]] = []

    async def fake_test(**kwargs: object) -> str:  # sampling needs a model: the e2e tests' job
        calls.append(kwargs)
        return "tested"

    monkeypatch.setattr(runner, "rl_test_inference", fake_test)
    assert here("test").returncode == 0
    assert here("test", "--steps", "2", "--group-size", "4", "--models", "a, b").returncode == 0
    assert calls == [{"models": None}, {"num_steps": 2, "group_size": 4, "models": ["a", "b"]}]


def test_stop_of_a_finished_run_is_a_no_op(here: Runner) -> None:
    write_finished_run()
    stopped = here("stop", FINISHED_ID)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.startswith(f"Run {FINISHED_ID} was already completed")


def test_start_without_a_selected_environment_exits_2(here: Runner) -> None:
    result = here("start", "total_steps=3")
    assert result.returncode == 2
    assert result.stderr.startswith("hermes-nb start: no environment selected")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not home.runs_dir().exists() or not any(home.runs_dir().iterdir())  # nothing was created


def test_start_help_names_its_options() -> None:
    helped = cli("start", "--help")
    assert helped.returncode == 0
    assert "--resume-from" in helped.stdout and "--wait" in helped.stdout


def test_following_a_run_ends_when_it_does(capsys: pytest.CaptureFixture[str]) -> None:
    paths = write_state(RUNNING_ID, "running", processes={"supervisor": this_process()})
    write_rows(paths.metrics, TRAINER_ROWS[:2])

    def finish_later() -> None:
        time.sleep(0.3)
        write_rows(paths.metrics, TRAINER_ROWS[2:])
        write_state(RUNNING_ID, "failed", processes={"supervisor": this_process()}, error="trainer exited with code 1")

    writer = threading.Thread(target=finish_later)
    writer.start()
    final = asyncio.run(follow_run(RUNNING_ID, poll_seconds=0.05))
    writer.join()
    assert (final.status, final.step) == ("failed", 4)
    progress = capsys.readouterr().err.splitlines()
    assert progress[0] == f"{RUNNING_ID}: running, step 2/10, reward 0.4"
    assert progress[-1] == f"{RUNNING_ID}: failed, step 4/10, reward 0.6"
    assert len(progress) == len(set(progress))  # a line only when something changed


def test_start_wait_exits_1_when_the_run_failed(capsys: pytest.CaptureFixture[str]) -> None:
    write_state(RUNNING_ID, "failed", processes={"supervisor": this_process()}, error="trainer exited with code 1")
    started = StartResult(
        run_id=RUNNING_ID, status="starting", environment="arithmetic", run_dir="", logs={},
        wandb_project="p", wandb_run_name="r", total_steps=10,
    )  # fmt: skip
    assert print_started(started, build_parser().parse_args(["start", "--wait"])) == EXIT_RUN_FAILED
    out = capsys.readouterr().out
    assert out.startswith(f"{RUNNING_ID}\n") and "failed" in out
