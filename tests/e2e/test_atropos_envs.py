"""An environment written against atroposlib, run as it is: listed, selected, trained, watched and failed, from a
real notebook executed with nbclient, with atroposlib installed in its own virtual environment (.venvs/atropos,
built by ``make test``; ``side_env_python`` skips these tests where it is absent, and fails them in CI).

The environment is tests/fixtures/atropos/add_env.py (chat completions through atroposlib's server manager,
``tokenize_for_trainer``, ``ScoredDataGroup``); its failure modes are in add_env_failures.py.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import psutil
import pytest
from run_helpers import finite, run, run_pids, survivors, wait_for_status
from side_envs import REPO_ROOT, side_env_python

from hermes_nb.api import (
    rl_check_status,
    rl_get_results,
    rl_select_environment,
    rl_start_training,
    rl_stop_training,
)
from hermes_nb.notebook.headless.execution import execute_notebook, png_outputs
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.recorded_batches import read_trajectories
from hermes_nb.protocol.run_files import TRAJECTORIES_FILE
from hermes_nb.protocol.run_state import read_run_state
from hermes_nb.protocol.trajectory import MASK_IGNORE
from hermes_nb.runs.run_dirs import known_run_ids
from hermes_nb.system import home
from hermes_nb.system.home import run_paths

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "atropos"
# A run of a few steps takes well under a minute here; a hung one must fail the test, not block the suite.
CELL_TIMEOUT_S = 300
# One cell's (or run's) wait in full after the rest of the test, so the named wait reports a hang, not
# pytest-timeout (300 s in pyproject, no more than one such wait).
TEST_TIMEOUT_S = 2 * CELL_TIMEOUT_S

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(TEST_TIMEOUT_S)]
STEPS = 6


@pytest.fixture
def atropos_python(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The environment Python with atroposlib, and the fixtures on the search path; runs left going are stopped."""
    python = side_env_python("atropos")
    monkeypatch.setenv(home.ENV_PATH_VAR, str(FIXTURES))
    monkeypatch.delenv(home.ENV_PYTHON_VAR, raising=False)
    yield python
    for run_id in known_run_ids():
        asyncio.run(rl_stop_training(run_id))


def execute(tmp_path: Path, name: str, cells: list[tuple[str, bool]]) -> Any:
    """Run ``cells`` (source, expected to raise) as a notebook in a fresh kernel; the executed notebook."""
    book = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(source, metadata={"tags": ["raises-exception"]} if raises else {})
            for source, raises in cells
        ]
    )
    nbformat.write(book, tmp_path / name)
    execution = execute_notebook(tmp_path / name, tmp_path / f"executed_{name}", cell_timeout_s=CELL_TIMEOUT_S)
    print(f"{name}: {execution.seconds:.0f} s")  # the measured time, shown with -s or on failure
    assert execution.ok, f"{execution.error}; executed copy: {execution.output}"
    return nbformat.read(execution.output, as_version=4)


def cell_with(book: Any, source: str) -> Any:
    [cell] = [c for c in book.cells if c.source == source]
    return cell


def shown(cell: Any) -> str:
    """Everything a cell displayed: text, HTML, and the message of an error."""
    parts = []
    for out in cell.outputs:
        parts += [str(value) for value in out.get("data", {}).values()]
        parts += [out.get("text", ""), f"{out.get('ename', '')}: {out.get('evalue', '')}"]
    return "\n".join(parts)


def test_a_notebook_lists_selects_trains_and_watches_an_atroposlib_environment(
    atropos_python: Path, tmp_path: Path
) -> None:
    book = execute(
        tmp_path,
        "atropos.ipynb",
        [
            ("%load_ext hermes_nb", False),
            (f"%config HermesNB.env_python = {str(atropos_python)!r}", False),
            ("%rl_list", False),
            ("%rl_select atropos_add", False),
            (f"%rl_start total_steps={STEPS}", False),
            ("%rl_watch --wait", False),
        ],
    )

    listing = shown(cell_with(book, "%rl_list"))
    assert "atropos_add" in listing and "[atroposlib]" in listing
    selection = shown(cell_with(book, "%rl_select atropos_add"))
    assert f"read and run by {atropos_python}" in selection
    assert "env.max_operand" in selection and "Operands are whole numbers from 0 to this." in selection
    assert len(png_outputs(cell_with(book, "%rl_watch --wait"))) == 1
    [run_id] = known_run_ids()
    status = run(rl_check_status(run_id))
    assert status.status == "completed", status.error
    assert status.step == STEPS
    # The environment's numbers, as atroposlib's wandb_log and evaluate_log gave them, under the run's names.
    assert finite(status.metrics.reward_mean) and finite(status.metrics.percent_correct)
    assert finite(status.metrics.eval_percent_correct)
    results = run(rl_get_results(run_id))
    assert len(results.history) == STEPS
    env_keys = set().union(*(row.values for row in env_rows(run_id)))
    assert {keys.ENV_REWARD_MEAN, keys.ENV_GROUPS_POSTED, keys.ENV_COMPLETION_TOKENS_MEAN} <= env_keys
    assert final_evaluation_step(run_id) == STEPS
    # W&B was on (offline, as every test runs it): atroposlib's own run sits beside the trainer's.
    assert len(list((home.run_dir(run_id) / "wandb").glob("offline-run-*"))) == 2
    assert "api_key" not in (home.home_dir() / "session.json").read_text()


def env_rows(run_id: str) -> list[keys.MetricsRow]:
    path = run_paths(run_id).env_metrics
    return [keys.MetricsRow.from_json_line(line) for line in path.read_text().splitlines()]


def final_evaluation_step(run_id: str) -> int:
    return max(row.step for row in env_rows(run_id) if keys.EVAL_PERCENT_CORRECT in row.values)


def test_each_failure_of_an_atroposlib_environment_ends_in_one_clear_message(
    atropos_python: Path, tmp_path: Path
) -> None:
    run_once = ("%rl_start total_steps=4 wandb.mode=disabled", "%rl_watch --wait", "%rl_status")
    book = execute(
        tmp_path,
        "atropos_failures.ipynb",
        [
            ("%load_ext hermes_nb", False),
            (f"%config HermesNB.env_python = {sys.executable!r}", False),  # hermes-nb's venv: no atroposlib
            ("%rl_select atropos_add", True),
            (f"%config HermesNB.env_python = {str(atropos_python)!r}", False),
            ("%rl_select atropos_add_crashing_setup", False),
            *[(source, False) for source in run_once],
            ("%rl_select atropos_add_early_exit", False),
            *[(f"{source} ", False) for source in run_once],  # a trailing space keeps each cell's source unique
        ],
    )

    # IPython prints a magic's UsageError as one line on stderr, without a traceback.
    [refused] = [out.text for out in cell_with(book, "%rl_select atropos_add").outputs]
    assert refused.startswith("UsageError: ") and refused.count("\n") == 1 and "Traceback" not in refused
    assert f"the environment Python {sys.executable}" in refused and "cannot import" in refused
    assert "pip install atroposlib" in refused
    crashed = shown(cell_with(book, "%rl_status"))
    assert "failed" in crashed and "env exited with code 1" in crashed
    assert "FileNotFoundError: add_problems.jsonl: the problem set is missing" in crashed
    early = shown(cell_with(book, "%rl_status "))
    assert "env exited with code 3" in early
    assert "EarlyExitEnv stopped feeding the run at trainer step" in early and "its total_steps is 1" in early
    statuses = [run(rl_check_status(run_id)) for run_id in sorted(known_run_ids())]
    assert [(s.environment, s.status, s.failed_process) for s in statuses] == [
        ("atropos_add_crashing_setup", "failed", "env"),
        ("atropos_add_early_exit", "failed", "env"),
    ]


def test_stopping_an_atroposlib_run_saves_a_checkpoint_and_ends_every_process(
    atropos_python: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(home.ENV_PYTHON_VAR, str(atropos_python))
    run(rl_select_environment("atropos_add"))
    start = run(rl_start_training(total_steps=500))
    wait_for_status(start.run_id, lambda s: s.step >= 2, CELL_TIMEOUT_S)
    supervisor = psutil.Process(run_pids(start.run_id)["supervisor"])
    family = [supervisor, *supervisor.children(recursive=True)]

    stopped = run(rl_stop_training(start.run_id))

    assert stopped.status == "stopped"
    assert stopped.final_checkpoint is not None and Path(stopped.final_checkpoint).is_dir()
    assert survivors(family) == []
    env = read_run_state(home.run_dir(start.run_id)).processes["env"]
    assert env.exit_code == 0  # the bridge ends atroposlib's loop on SIGTERM as a native environment ends
    assert json.loads((home.run_dir(start.run_id) / "run.json").read_text())["status"] == "stopped"


def test_an_environment_sampling_through_managed_server_trains_on_the_tokens_and_logprobs_it_sampled(
    atropos_python: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(home.ENV_PYTHON_VAR, str(atropos_python))
    run(rl_select_environment("atropos_add_managed"))
    start = run(rl_start_training(total_steps=3))
    status = wait_for_status(start.run_id, lambda s: s.status in ("completed", "failed"), CELL_TIMEOUT_S)
    assert status.status == "completed", status.error

    trained = [
        group for _, groups in read_trajectories(home.run_dir(start.run_id) / TRAJECTORIES_FILE) for group in groups
    ]
    assert trained
    for group in trained:
        assert group.inference_logprobs is not None  # the server's own, kept by atroposlib's managed server
        for tokens, masks, logprobs in zip(group.tokens, group.masks, group.inference_logprobs, strict=True):
            sampled = [i for i, mask in enumerate(masks) if mask != MASK_IGNORE]
            assert sampled and all(masks[i] == tokens[i] for i in sampled)
            assert all(logprobs[i] <= 0.0 for i in sampled) and any(logprobs[i] < 0.0 for i in sampled)


def test_an_environment_that_leaves_wandb_name_unset_registers_under_its_name_and_trains(
    atropos_python: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(home.ENV_PYTHON_VAR, str(atropos_python))
    run(rl_select_environment("atropos_add_unnamed"))
    start = run(rl_start_training(total_steps=2, **{"wandb.mode": "disabled"}))
    status = wait_for_status(start.run_id, lambda s: s.status in ("completed", "failed"), CELL_TIMEOUT_S)
    assert status.status == "completed", status.error
