"""The pre-run estimate: a quickstart run's memory within 25% of a measured step, time from earlier runs when there
are any, prices only from the user's table, and a start that cannot fit refused with nothing created."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hermes_nb import api
from hermes_nb.config import RunConfig, base_model_dir
from hermes_nb.errors import ConfigError
from hermes_nb.protocol.metrics import TRAIN_STEP_SECONDS, MetricsRow
from hermes_nb.protocol.run_files import TRAINER_METRICS_FILE
from hermes_nb.runs import estimate, prices
from hermes_nb.runs.estimate import RunEstimate, check_fits, estimate_config
from hermes_nb.selection.current import current_run_config
from hermes_nb.system import home

UNIT_DIR = Path(__file__).resolve().parent
REPO_ROOT = UNIT_DIR.parents[1]
MIB = 1 << 20
# The quickstart's batch: 128 sequences of at most 64 tokens (configs/quickstart.yaml, the arithmetic env).
QUICKSTART_SEQUENCES, QUICKSTART_TOKENS = 128, 64


@pytest.fixture
def quickstart() -> RunConfig:
    asyncio.run(api.rl_select_environment("arithmetic"))
    asyncio.run(api.rl_load_config("quickstart"))
    return current_run_config()


def test_the_quickstart_trainer_memory_is_within_25_percent_of_a_measured_step(quickstart: RunConfig) -> None:
    # Measured as tests/unit/test_memory_model.py does: a step's resident-memory growth in a process of its own.
    model = base_model_dir(quickstart.trainer.base_model)
    probe = [sys.executable, str(UNIT_DIR / "memory_probe.py"), str(model), str(QUICKSTART_SEQUENCES),
             str(QUICKSTART_TOKENS)]  # fmt: skip
    out = subprocess.run(probe, capture_output=True, text=True, check=True, env=os.environ)
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    growth = measured["peak"] - measured["before"]
    predicted = next(p.bytes for p in estimate_config(quickstart).processes if p.process == "trainer")
    assert abs(growth - predicted) <= 0.25 * predicted, (
        f"measured {growth / MIB:.0f} MiB, predicted {predicted / MIB:.0f}"
    )


def test_the_quickstart_fits_and_says_where_its_time_comes_from(quickstart: RunConfig) -> None:
    result = asyncio.run(api.rl_estimate_run())
    assert isinstance(result, RunEstimate)
    assert result.fits and result.free_bytes and result.memory_bytes < result.free_bytes
    assert result.time_source == "stated per-step cost"
    assert result.total_seconds == pytest.approx(result.seconds_per_step * 1400)
    assert result.tokens_sampled == 1400 * QUICKSTART_SEQUENCES * QUICKSTART_TOKENS
    assert "stated per-step cost" in str(result) and "<table>" in result._repr_html_()


def test_overrides_change_the_estimate_and_nothing_is_saved(quickstart: RunConfig) -> None:
    bigger = asyncio.run(api.rl_estimate_run(batch_size=256, total_steps=10))
    assert bigger.total_steps == 10
    assert bigger.memory_bytes > asyncio.run(api.rl_estimate_run()).memory_bytes
    assert current_run_config().env_value("batch_size") == QUICKSTART_SEQUENCES


def write_earlier_run(config: RunConfig, run_id: str, step_seconds: list[float]) -> None:
    run_dir = home.run_dir(run_id)
    run_dir.mkdir(parents=True)
    config.save(run_dir / "config.yaml")
    rows = [MetricsRow(step=step, time=float(step), values={TRAIN_STEP_SECONDS: seconds})
            for step, seconds in enumerate(step_seconds, start=1)]  # fmt: skip
    (run_dir / TRAINER_METRICS_FILE).write_text("".join(row.to_json_line() for row in rows), encoding="utf-8")


def test_earlier_runs_of_the_same_sizes_give_the_step_time(quickstart: RunConfig) -> None:
    write_earlier_run(quickstart, "20260101-000000-aaaaaaaaaa", [0.3, 0.5, 0.4])
    other = quickstart.model_copy(update={"env": {**quickstart.env, "batch_size": 64}})
    write_earlier_run(other, "20260101-000001-bbbbbbbbbb", [9.0, 9.0, 9.0])  # other sizes: not comparable
    result = estimate_config(quickstart)
    assert (result.time_source, result.seconds_per_step) == ("earlier runs", pytest.approx(0.4))


def test_an_earlier_run_of_another_environment_at_the_same_sizes_does_not_give_the_step_time(
    quickstart: RunConfig,
) -> None:
    assert quickstart.environment is not None
    agent = quickstart.environment.model_copy(update={"name": "calculator_agent"})
    write_earlier_run(quickstart.model_copy(update={"environment": agent}), "20260101-000000-cccccccccc", [3.0])
    result = estimate_config(quickstart)
    assert result.time_source == "stated per-step cost"
    assert "no earlier run of this environment, model and sizes here" in str(result)


def tinker(config: RunConfig) -> RunConfig:
    trainer = config.trainer.model_copy(update={"backend": "tinker", "base_model": "Qwen/Qwen3-8B"})
    return config.model_copy(update={"trainer": trainer})


def test_a_tinker_run_without_a_price_table_has_no_price(quickstart: RunConfig) -> None:
    result = estimate_config(tinker(quickstart))
    assert result.price_usd is None
    assert "no price known for Qwen/Qwen3-8B" in result.price_source and "no price known" in str(result)


def test_a_tinker_run_is_priced_from_the_users_table_naming_its_source(quickstart: RunConfig) -> None:
    entry = {"sample_per_million_tokens": 0.1, "train_per_million_tokens": 0.3, "source": "my invoice",
             "date": "2026-12-01"}  # fmt: skip
    prices.prices_path().parent.mkdir(parents=True, exist_ok=True)
    prices.prices_path().write_text(yaml.safe_dump({"Qwen/Qwen3-8B": entry}), encoding="utf-8")
    result = estimate_config(tinker(quickstart))
    assert result.price_usd == pytest.approx(result.tokens_sampled / 1e6 * 0.4)
    assert "my invoice, 2026-12-01" in result.price_source


def test_a_huge_batch_does_not_fit_and_names_what_to_change(quickstart: RunConfig) -> None:
    result = asyncio.run(api.rl_estimate_run(batch_size=65536, max_token_length=4096))
    assert not result.fits
    assert {"trainer.lora_rank", "trainer.gradient_checkpointing", "env.max_token_length"} <= set(result.to_change)
    assert "DOES NOT FIT" in str(result)


def test_a_start_that_cannot_fit_is_refused_with_nothing_created(
    quickstart: RunConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(estimate, "device_memory", lambda device: (64 * MIB, 1024 * MIB))  # 64 MiB free
    with pytest.raises(ConfigError, match="trainer.gradient_checkpointing.*trainer.ignore_memory_estimate=true"):
        asyncio.run(api.rl_start_training(total_steps=5))
    assert not home.runs_dir().exists() or not any(home.runs_dir().iterdir())


def test_ignore_memory_estimate_lets_it_through(quickstart: RunConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(estimate, "device_memory", lambda device: (64 * MIB, 1024 * MIB))
    trainer = quickstart.trainer.model_copy(update={"ignore_memory_estimate": True})
    check_fits(quickstart.model_copy(update={"trainer": trainer}))  # no error


def test_the_cli_prints_the_estimate(quickstart: RunConfig) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-m", "hermes_nb.cli", "estimate", "total_steps=7", "--json"]
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert (answer["total_steps"], answer["fits"]) == (7, True)


def test_the_cli_exits_3_when_the_run_cannot_fit_and_its_help_says_so(quickstart: RunConfig) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-m", "hermes_nb.cli", "estimate", "batch_size=65536", "max_token_length=4096"]
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 3, out.stderr
    assert "DOES NOT FIT" in out.stdout and "trainer.gradient_checkpointing" in out.stdout
    shown = subprocess.run([*command[:4], "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert "Exit status: 3 when the run cannot fit" in " ".join(shown.stdout.split())
