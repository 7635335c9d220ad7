"""The lifecycle's read side (status, results, logs, runs) on fabricated run directories and real processes."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
from run_dirs import (
    FINISHED_ID,
    OTHER_ID,
    T0,
    TRAINER_ROWS,
    dead_process,
    group_leader,
    this_process,
    write_checkpoint,
    write_finished_run,
    write_rows,
    write_state,
)

from hermes_nb import api
from hermes_nb.errors import HermesNBError, UnknownRunError
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.protocol.run_state import ProcessRecord, read_run_state
from hermes_nb.runs.table import wandb_remote

T = TypeVar("T")
RUNNING_ID = "20250102-090000-hjkmnpqrst"


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def write_running_run(supervisor: ProcessRecord, **others: ProcessRecord) -> RunPaths:
    paths = write_state(RUNNING_ID, "running", processes={"supervisor": supervisor, **others})
    write_rows(paths.metrics, TRAINER_ROWS)
    return paths


# ---- status ----------------------------------------------------------------------------------------------------
def test_status_reads_the_latest_trainer_metrics_and_the_latest_eval() -> None:
    write_finished_run()
    status = run(api.rl_check_status(FINISHED_ID))
    assert (status.status, status.step, status.total_steps) == ("completed", 4, 4)
    m = status.metrics
    assert (m.step, m.reward_mean, m.percent_correct, m.loss) == (4, 0.6, 0.7, 1.0)
    assert m.eval_percent_correct == 0.50
    assert status.running_seconds == 100
    assert status.eta_seconds is None  # a finished run has nothing left to estimate


def test_status_eta_is_remaining_steps_times_recent_step_time() -> None:
    write_running_run(this_process())
    status = run(api.rl_check_status(RUNNING_ID))
    assert status.status == "running"
    assert status.eta_seconds == pytest.approx((10 - 4) * 10.0)  # 10 s per step in the rows, 6 steps to go


def test_status_lists_only_checkpoints_whose_directories_exist() -> None:
    paths = write_finished_run()
    status = run(api.rl_check_status(FINISHED_ID))
    assert [(c.step, c.kind) for c in status.checkpoints] == [(4, "final")]
    assert status.checkpoints[0].path == str(paths.checkpoints_dir / "step_4")


def test_a_step_checkpointed_twice_is_listed_once_with_its_newest_kind() -> None:
    paths = write_finished_run()
    write_checkpoint(paths, 4, kind="stop")
    assert [(c.step, c.kind) for c in run(api.rl_check_status(FINISHED_ID)).checkpoints] == [(4, "stop")]


def test_no_run_id_means_the_newest_run() -> None:
    write_state(OTHER_ID)
    write_finished_run()
    assert run(api.rl_check_status()).run_id == FINISHED_ID


def test_an_unknown_run_id_is_one_line_listing_the_known_runs() -> None:
    write_state(OTHER_ID)
    write_finished_run()
    with pytest.raises(UnknownRunError) as caught:
        run(api.rl_check_status("20250101-120000-nosuchrunx"))
    message = str(caught.value)
    assert "unknown run '20250101-120000-nosuchrunx'" in message
    assert FINISHED_ID in message and OTHER_ID in message
    assert "\n" not in message


def test_no_runs_at_all_says_how_to_start_one() -> None:
    with pytest.raises(UnknownRunError, match="no runs yet"):
        run(api.rl_check_status())


def test_an_unreadable_run_json_is_one_line_naming_the_file() -> None:
    paths = write_state(OTHER_ID)
    paths.state.write_text('{"run_id": "x"}', encoding="utf-8")
    status = run(api.rl_check_status(OTHER_ID))  # shown from its other files (tests/unit/test_damaged_runs.py)
    (damage,) = status.damaged
    assert damage.file == str(paths.state) and "\n" not in damage.problem


# ---- reconciling a run whose supervisor is gone ----------------------------------------------------------------
def test_a_running_run_whose_supervisor_died_is_failed_naming_the_supervisor() -> None:
    paths = write_running_run(dead_process())
    paths.logs["supervisor"].parent.mkdir(parents=True, exist_ok=True)
    paths.logs["supervisor"].write_text("starting trainer\nKilled\n", encoding="utf-8")
    status = run(api.rl_check_status(RUNNING_ID))
    assert (status.status, status.failed_process) == ("failed", "supervisor")
    assert status.error is not None and "supervisor died" in status.error
    assert str(paths.logs["supervisor"]) in status.error and "Killed" in status.error
    assert read_run_state(paths.run_dir).status == "failed"  # written back, so every reader agrees


def test_a_live_supervisor_keeps_the_run_running() -> None:
    paths = write_running_run(this_process())
    assert run(api.rl_check_status(RUNNING_ID)).status == "running"
    assert read_run_state(paths.run_dir).status == "running"


def test_a_reused_pid_is_not_taken_for_the_supervisor() -> None:
    me = psutil.Process()
    impostor = ProcessRecord(name="supervisor", pid=me.pid, started_at=me.create_time() - 3600)
    write_running_run(impostor)
    assert run(api.rl_check_status(RUNNING_ID)).status == "failed"


def test_reconciling_never_signals_a_process_that_reused_a_childs_pid() -> None:
    with group_leader() as stranger:
        trainer = ProcessRecord(name="trainer", pid=stranger.pid, started_at=T0)  # the run's trainer, long gone
        write_running_run(dead_process(), trainer=trainer)
        assert run(api.rl_check_status(RUNNING_ID)).status == "failed"
        assert stranger.poll() is None, "a process that merely has the old trainer's pid was signalled"


def test_a_run_just_created_waits_for_its_supervisor_to_appear() -> None:
    write_state(RUNNING_ID, "starting", created_at=time.time(), started_at=None)
    assert run(api.rl_check_status(RUNNING_ID)).status == "starting"


def test_a_run_whose_supervisor_never_appeared_is_failed() -> None:
    write_state(RUNNING_ID, "starting", started_at=None)  # created long ago, no supervisor recorded
    status = run(api.rl_check_status(RUNNING_ID))
    assert status.status == "failed" and status.error is not None and "never started" in status.error


# ---- results, logs, runs ---------------------------------------------------------------------------------------
def test_results_give_final_and_best_metrics_history_and_final_weights() -> None:
    paths = write_finished_run()
    results = run(api.rl_get_results(FINISHED_ID))
    assert results.final_metrics == {
        keys.TRAIN_REWARD_MEAN: 0.6,
        keys.TRAIN_PERCENT_CORRECT: 0.7,
        keys.TRAIN_LOSS: 1.0,
        keys.EVAL_PERCENT_CORRECT: 0.50,
    }
    assert results.best_metrics == {
        keys.TRAIN_REWARD_MEAN: 0.9,
        keys.TRAIN_PERCENT_CORRECT: 0.8,
        keys.TRAIN_LOSS: 1.0,  # lower is better for the loss
        keys.EVAL_PERCENT_CORRECT: 0.55,
    }
    assert [row["step"] for row in results.history] == [1, 2, 3, 4]
    assert results.history[2][keys.TRAIN_REWARD_MEAN] == 0.9
    assert [row["step"] for row in results.eval_history] == [2, 4]
    assert results.final_weights_path == str(paths.checkpoints_dir / "step_4")


def test_an_environments_own_train_keys_in_an_eval_row_do_not_replace_the_trainers() -> None:
    paths = write_finished_run()
    row = {"step": 4, "time": T0 + 50, "values": {keys.EVAL_PERCENT_CORRECT: 0.6, keys.TRAIN_REWARD_MEAN: 5.0}}
    with paths.env_metrics.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")
    results = run(api.rl_get_results(FINISHED_ID))
    assert results.final_metrics[keys.TRAIN_REWARD_MEAN] == 0.6
    assert results.best_metrics[keys.TRAIN_REWARD_MEAN] == 0.9
    assert results.final_metrics[keys.EVAL_PERCENT_CORRECT] == 0.6


def test_tail_logs_returns_the_last_lines() -> None:
    paths = write_finished_run()
    tail = run(api.rl_tail_logs(FINISHED_ID, lines=3))
    assert tail.lines == ["trainer line 98", "trainer line 99", "trainer line 100"]
    assert tail.path == str(paths.logs["trainer"])


def test_tail_logs_of_a_process_that_wrote_nothing_is_empty() -> None:
    write_finished_run()
    assert run(api.rl_tail_logs(FINISHED_ID, process="env")).lines == []


@pytest.mark.parametrize(
    ("process", "lines", "expected"), [("worker", 5, "choose one of api, trainer, env"), ("trainer", 0, "lines: 0")]
)
def test_tail_logs_refuses_an_unknown_process_or_line_count(process: str, lines: int, expected: str) -> None:
    write_finished_run()
    with pytest.raises(HermesNBError, match=expected):
        run(api.rl_tail_logs(FINISHED_ID, process=process, lines=lines))


def test_list_runs_newest_first_with_their_last_step() -> None:
    write_state(OTHER_ID, "stopped")
    write_finished_run()
    listed = run(api.rl_list_runs())
    assert [(r.run_id, r.status, r.step) for r in listed.runs] == [
        (FINISHED_ID, "completed", 4),
        (OTHER_ID, "stopped", 0),
    ]
    assert listed.to_dict()["count"] == 2


def test_list_runs_on_an_empty_home() -> None:
    assert run(api.rl_list_runs()).runs == []


# ---- W&B remote status -----------------------------------------------------------------------------------------
@pytest.fixture
def fetches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def fake(run_path: str) -> dict[str, Any]:
        calls.append(run_path)
        return {"train/reward_mean": 0.5 + len(calls)}

    monkeypatch.setattr(wandb_remote, "_fetch_summary", fake)
    monkeypatch.setenv(wandb_remote.INTERVAL_ENV_VAR, "3600")
    return calls


def write_wandb_info(paths: RunPaths, mode: str) -> None:
    info = {"role": "trainer", "mode": mode, "project": "hermes-nb", "entity": "me", "id": "abc123",
            "url": "https://wandb.ai/me/hermes-nb/runs/abc123" if mode == "online" else None}  # fmt: skip
    (paths.run_dir / wandb_remote.TRAINER_RUN_FILE).write_text(json.dumps(info), encoding="utf-8")


def test_an_online_run_is_queried_at_most_once_per_interval(fetches: list[str]) -> None:
    write_wandb_info(write_finished_run(), "online")
    first = run(api.rl_check_status(FINISHED_ID)).wandb
    second = run(api.rl_check_status(FINISHED_ID)).wandb
    assert fetches == ["me/hermes-nb/abc123"]
    assert first is not None and second is not None
    assert first.summary == second.summary == {"train/reward_mean": 1.5}
    assert second.age_seconds is not None and second.age_seconds >= 0
    assert second.url == "https://wandb.ai/me/hermes-nb/runs/abc123"


def test_the_remote_is_queried_again_once_the_interval_has_passed(
    fetches: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_wandb_info(write_finished_run(), "online")
    monkeypatch.setenv(wandb_remote.INTERVAL_ENV_VAR, "0.2")
    run(api.rl_check_status(FINISHED_ID))
    time.sleep(0.3)
    status = run(api.rl_check_status(FINISHED_ID))
    assert len(fetches) == 2
    assert status.wandb is not None and status.wandb.summary == {"train/reward_mean": 2.5}


def test_an_unknown_run_id_does_not_use_up_a_window(fetches: list[str]) -> None:
    write_wandb_info(write_finished_run(), "online")
    with pytest.raises(UnknownRunError):
        run(api.rl_check_status("20250101-120000-nosuchrunx"))
    assert fetches == []
    run(api.rl_check_status(FINISHED_ID))
    assert len(fetches) == 1


def test_an_offline_run_never_queries_the_remote(fetches: list[str]) -> None:
    write_wandb_info(write_finished_run(), "offline")
    assert run(api.rl_check_status(FINISHED_ID)).wandb is None
    assert fetches == []


def test_a_failed_query_is_reported_and_not_retried_within_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def down(run_path: str) -> dict[str, Any]:
        calls.append(run_path)
        raise ConnectionError("api.wandb.ai unreachable")

    monkeypatch.setattr(wandb_remote, "_fetch_summary", down)
    monkeypatch.setenv(wandb_remote.INTERVAL_ENV_VAR, "3600")
    write_wandb_info(write_finished_run(), "online")
    first = run(api.rl_check_status(FINISHED_ID))
    second = run(api.rl_check_status(FINISHED_ID))
    assert len(calls) == 1
    assert first.status == "completed"  # the local status is whole despite W&B being down
    for status in (first, second):
        assert status.wandb is not None and status.wandb.note is not None
        assert "ConnectionError: api.wandb.ai unreachable" in status.wandb.note


def test_a_damaged_cache_is_replaced_by_a_fresh_query(fetches: list[str]) -> None:
    paths = write_finished_run()
    write_wandb_info(paths, "online")
    (paths.run_dir / wandb_remote.CACHE_FILE).write_text('{"fetched_at": "soon"}', encoding="utf-8")
    status = run(api.rl_check_status(FINISHED_ID))
    assert len(fetches) == 1 and status.wandb is not None and status.wandb.summary


def test_the_json_answer_has_the_original_tools_keys() -> None:
    write_finished_run()
    data = run(api.rl_check_status(FINISHED_ID)).to_dict()
    assert data["progress"] == "4/4" and data["wandb_run"] == f"arithmetic-{FINISHED_ID}"
    assert {"status", "running_time_minutes", "metrics", "processes", "checkpoints"} <= set(data)
    assert Path(data["logs"]["trainer"]).name == f"trainer_{FINISHED_ID}.log"
