"""MetricsLogger writes flushed JSONL rows that readers read incrementally; W&B is a mirror that may fail."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from hermes_nb.metrics import wandb_mirror
from hermes_nb.metrics.logger import (
    MetricsLogger,
    WandbRunSettings,
    read_metrics,
    resolve_wandb_mode,
    wandb_info_path,
)
from hermes_nb.protocol.metrics import MetricsRow


def test_rows_are_readable_before_close_and_incrementally(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    metrics = MetricsLogger(path)
    metrics.log(0, {"train/loss": 1.5})
    rows, offset = read_metrics(path)
    assert [(r.step, r.values) for r in rows] == [(0, {"train/loss": 1.5})]

    metrics.log(1, {"train/loss": 1.25, "train/reward_mean": 0.5})
    metrics.log(2, {"train/loss": 1.0})
    new_rows, new_offset = read_metrics(path, offset)
    assert [r.step for r in new_rows] == [1, 2]
    assert new_rows[0].values["train/reward_mean"] == 0.5
    assert read_metrics(path, new_offset) == ([], new_offset)
    metrics.close()


def test_partial_last_line_is_left_for_the_next_read(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    whole = MetricsRow(step=3, time=1.0, values={"a": 1.0}).to_json_line()
    path.write_text(whole + whole[:10], encoding="utf-8")
    rows, offset = read_metrics(path)
    assert [r.step for r in rows] == [3]
    assert offset == len(whole.encode())

    with path.open("a", encoding="utf-8") as handle:
        handle.write(whole[10:])
    rows, offset = read_metrics(path, offset)
    assert [r.step for r in rows] == [3]
    assert offset == path.stat().st_size


def test_missing_file_and_truncated_file_read_from_start(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    assert read_metrics(path) == ([], 0)
    path.write_text(MetricsRow(step=7, time=1.0, values={}).to_json_line(), encoding="utf-8")
    rows, _ = read_metrics(path, start_offset=10_000)
    assert [r.step for r in rows] == [7]


def test_non_finite_values_are_dropped_not_written_as_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    with MetricsLogger(path) as metrics:
        metrics.log(0, {"ok": 2.0, "nan": float("nan"), "inf": float("inf")})
    rows, _ = read_metrics(path)
    assert rows[0].values == {"ok": 2.0}


def test_offline_wandb_writes_run_files_under_the_run_dir(tmp_path: Path) -> None:
    settings = WandbRunSettings(project="hermes-nb-test", name="unit", mode="offline", dir=tmp_path, role="env")
    metrics = MetricsLogger(tmp_path / "env_metrics.jsonl", wandb=settings)
    for step in range(3):
        metrics.log(step, {"train/reward_mean": step / 2})
    metrics.close()

    assert not metrics.wandb_failed
    run_files = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(run_files) == 1 and run_files[0].stat().st_size > 0
    info = json.loads(wandb_info_path(tmp_path, "env").read_text())
    assert info["mode"] == "offline" and info["name"] == "unit" and info["id"] in run_files[0].name
    assert len(read_metrics(tmp_path / "env_metrics.jsonl")[0]) == 3


FAKE_WANDB = Path(__file__).parent.parent / "fixtures" / "fake_wandb"


def _warnings(captured: str) -> list[str]:
    return [line for line in captured.splitlines() if "WARNING" in line and "W&B" in line]


def test_wandb_init_failure_does_not_stop_jsonl_logging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # The real SDK, online, with no key anywhere it looks (environment, ~/.netrc): wandb.init refuses.
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    metrics = MetricsLogger(tmp_path / "m.jsonl", wandb=WandbRunSettings(dir=tmp_path, mode="online"))
    for step in range(5):
        metrics.log(step, {"x": float(step)})
    metrics.close(timeout=30)

    assert metrics.wandb_failed
    assert [r.step for r in read_metrics(tmp_path / "m.jsonl")[0]] == [0, 1, 2, 3, 4]
    warnings = _warnings(capfd.readouterr().err)
    assert len(warnings) == 1 and "could not start" in warnings[0] and "API key" in warnings[0]
    assert not wandb_info_path(tmp_path, "trainer").exists()


def test_wandb_log_failure_is_reported_once_and_jsonl_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "calls.txt"
    monkeypatch.setenv("PYTHONPATH", str(FAKE_WANDB))
    monkeypatch.setenv("FAKE_WANDB_RECORD", str(record))
    metrics = MetricsLogger(tmp_path / "m.jsonl", wandb=WandbRunSettings(dir=tmp_path, mode="online"))
    for step in range(4):
        metrics.log(step, {"x": 1.0})
    metrics.close(timeout=30)

    assert len(read_metrics(tmp_path / "m.jsonl")[0]) == 4
    assert metrics.wandb_failed
    assert record.read_text().split() == ["init", "log", "finish"]
    warnings = _warnings(capfd.readouterr().err)
    assert len(warnings) == 1 and "network down" in warnings[0]


def test_a_mirror_that_cannot_be_started_leaves_training_and_the_jsonl_going(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python-here"))
    with caplog.at_level(logging.WARNING, logger="hermes_nb.metrics.logger"):
        metrics = MetricsLogger(tmp_path / "m.jsonl", wandb=WandbRunSettings(dir=tmp_path, mode="offline"))
        for step in range(3):
            metrics.log(step, {"x": float(step)})
        metrics.close(timeout=5)

    assert metrics.wandb_failed
    assert [r.step for r in read_metrics(tmp_path / "m.jsonl")[0]] == [0, 1, 2]
    warnings = [r.getMessage() for r in caplog.records if "W&B" in r.getMessage()]
    assert len(warnings) == 1 and "could not start its mirror" in warnings[0]


def test_the_wandb_mirror_runs_below_the_training_processes_priority(tmp_path: Path) -> None:
    settings = WandbRunSettings(project="hermes-nb-test", name="nice", mode="offline", dir=tmp_path)
    metrics = MetricsLogger(tmp_path / "m.jsonl", wandb=settings)
    try:
        mirrors = [p for p in psutil.Process().children() if wandb_mirror.__name__ in " ".join(p.cmdline())]
        deadline = time.monotonic() + 30
        while mirrors and mirrors[0].nice() == os.nice(0) and time.monotonic() < deadline:
            time.sleep(0.05)  # it lowers its priority first thing after it starts
        assert len(mirrors) == 1
        assert mirrors[0].nice() == min(19, os.nice(0) + wandb_mirror.MIRROR_NICENESS)
    finally:
        metrics.close()
    assert not metrics.wandb_failed and not mirrors[0].is_running()


def test_disabled_mode_starts_no_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "calls.txt"
    monkeypatch.setenv("PYTHONPATH", str(FAKE_WANDB))
    monkeypatch.setenv("FAKE_WANDB_RECORD", str(record))
    with MetricsLogger(tmp_path / "m.jsonl", wandb=WandbRunSettings(dir=tmp_path, mode="disabled")) as m:
        m.log(0, {"x": 1.0})
    assert not m.wandb_failed and not (tmp_path / "wandb").exists() and not record.exists()


def test_log_after_close_raises(tmp_path: Path) -> None:
    metrics = MetricsLogger(tmp_path / "m.jsonl")
    metrics.close()
    metrics.close()
    with pytest.raises(RuntimeError, match="closed"):
        metrics.log(0, {"x": 1.0})


@pytest.mark.parametrize(
    ("config_mode", "env", "expected"),
    [
        ("auto", {"WANDB_API_KEY": "k"}, "online"),
        ("auto", {}, "offline"),
        ("auto", {"WANDB_API_KEY": "k", "WANDB_MODE": "offline"}, "offline"),
        ("auto", {"WANDB_MODE": "disabled"}, "disabled"),
        ("online", {}, "online"),
        ("disabled", {"WANDB_API_KEY": "k"}, "disabled"),
    ],
)
def test_resolve_wandb_mode(
    monkeypatch: pytest.MonkeyPatch, config_mode: str, env: dict[str, str], expected: str
) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert resolve_wandb_mode(config_mode) == expected


def test_resolve_wandb_mode_rejects_unknown_mode() -> None:
    with pytest.raises(ValueError, match=r"wandb\.mode"):
        resolve_wandb_mode("sometimes")
