"""A verifiers environment run as it is: the shipped ``addition_verifiers`` selected, edited and trained to
``completed`` on the embedded chat model through verifiers' train client, training exactly the tokens the run's
inference server sampled, with either harness (``hermes_nb_chat`` plays the episodes in the environment's process,
verifiers' ``null`` starts a chat program under uv for each); the tool environment ``calculator_verifiers``
likewise with the default settings, its ``calculate`` calls in the recorded samples, its episodes multi-turn and
its held-out split evaluated; and tests/fixtures/verifiers/broken_verifiers.py's
crashing reward ending a run in one message with the environment's log tail. verifiers lives in its own virtual
environment (.venvs/verifiers, built by ``make test``; ``side_env_python`` skips these tests where it is absent, and
fails them in CI)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from run_helpers import alive_after, run, run_pids, wait_for_status
from sampled_logprobs import LOGPROB_TOLERANCE, trained_groups, worst_logprob_gap
from side_envs import REPO_ROOT, side_env_python

from hermes_nb.api import (
    rl_edit_config,
    rl_get_samples,
    rl_select_environment,
    rl_start_training,
    rl_stop_training,
    rl_tail_logs,
)
from hermes_nb.config import embedded_chat_model_dir
from hermes_nb.frameworks.verifiers.interpreter import VERIFIERS_PYTHON_VAR
from hermes_nb.metrics.reader import read_all_metrics
from hermes_nb.protocol.metrics import ENV_TURNS_MEAN, EVAL_PERCENT_CORRECT
from hermes_nb.runs.run_dirs import known_run_ids
from hermes_nb.system import home

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "verifiers"
# With verifiers' null harness each episode starts a chat program (a Python process): a short run takes a minute or
# two here.
RUN_TIMEOUT_S = 300
WATCH_POLL_S = 0.05
# A completed run's environment process exits within seconds; its log's last lines hold what it said at exit.
EXIT_TIMEOUT_S = 60
ENV_LOG_LINES = 30
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(2 * RUN_TIMEOUT_S)]
SHORT = {"group_size": 2, "batch_size": 4, "eval_items": 2, "max_num_workers": 2, "wandb.mode": "disabled"}
# The embedded chat model rarely adds right: groups scoring all 0 are kept (advantage 0) so the run moves.
KEEP_FLAT_GROUPS = {"ensure_scores_are_not_same": False}


@pytest.fixture
def verifiers_python(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    python = side_env_python("verifiers")
    monkeypatch.setenv(VERIFIERS_PYTHON_VAR, str(python))
    monkeypatch.setenv(home.ENV_PATH_VAR, str(FIXTURES))
    yield python
    for run_id in known_run_ids():
        run(rl_stop_training(run_id))


class DescendantWatch:
    """The command lines of every process a process started, seen by polling until the watch ends."""

    def __init__(self, pid_of: Callable[[], int | None]) -> None:
        self.pid_of = pid_of
        self.seen: set[tuple[str, ...]] = set()
        self.polls = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> DescendantWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._done.wait(WATCH_POLL_S):
            pid = self.pid_of()
            if pid is None:
                continue
            try:
                for child in psutil.Process(pid).children(recursive=True):
                    self.seen.add(tuple(child.cmdline()))  # empty for a child that has just exited
            except psutil.Error:  # not started yet, or gone: the run's status says which
                continue
            self.polls += 1


def is_program(executable: str) -> bool:
    return executable == "uv" or executable.startswith("python")


def env_pid(run_id: str) -> Callable[[], int | None]:
    return lambda: run_pids(run_id).get("env")


@pytest.mark.parametrize("harness", ["hermes_nb_chat", "null"])
def test_addition_verifiers_trains_to_completed_on_the_tokens_it_sampled(verifiers_python: Path, harness: str) -> None:
    run(rl_select_environment("addition_verifiers"))
    run(
        rl_edit_config({**SHORT, **KEEP_FLAT_GROUPS, "env.eval_taskset": {"split": "held_out"}, "env.harness": harness})
    )

    start = run(rl_start_training(total_steps=2))
    with DescendantWatch(env_pid(start.run_id)) as watch:
        status = wait_for_status(start.run_id, lambda s: s.is_terminal, RUN_TIMEOUT_S)

    assert status.status == "completed", status.error
    assert watch.polls > 10  # the environment process was watched while it ran
    # A chat program is uv and the Python it starts; verifiers may also run a probe (`true`) on a failure path.
    chat_programs = [command for command in watch.seen if command and is_program(Path(command[0]).name)]
    if harness == "null":
        assert chat_programs  # a program under uv for each episode
    else:
        assert chat_programs == [], watch.seen  # every episode in the environment's own process
    # Step 1 trains groups sampled from the starting weights: every trained position is the sampled token, with
    # the server's logprob for it, recomputed here from those weights.
    gap = worst_logprob_gap(trained_groups(home.run_dir(start.run_id))[1], embedded_chat_model_dir(), temperature=1.0)
    assert gap <= LOGPROB_TOLERANCE, f"a kept logprob differs from the model's by {gap}"
    env_metrics = (home.run_dir(start.run_id) / "env_metrics.jsonl").read_text()
    assert "verifiers/reply_chars" in env_metrics and "eval/percent_correct" in env_metrics
    # The environment process closed what it opened (the harness's HTTP session among them) before it exited.
    assert alive_after([run_pids(start.run_id)["env"]], EXIT_TIMEOUT_S) == []
    env_log = "\n".join(run(rl_tail_logs(start.run_id, process="env", lines=ENV_LOG_LINES)).lines)
    assert "environment completed" in env_log and "Unclosed" not in env_log


def test_calculator_verifiers_trains_to_completed_with_its_tool_calls_on_the_tokens_it_sampled(
    verifiers_python: Path,
) -> None:
    run(rl_select_environment("calculator_verifiers"))
    # The episode limits are the defaults (AgentEnv's), and so is the evaluation: the taskset's held-out split.
    run(rl_edit_config({**SHORT, **KEEP_FLAT_GROUPS}))

    start = run(rl_start_training(total_steps=2))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, RUN_TIMEOUT_S)

    assert status.status == "completed", status.error
    # Step 1 trains groups sampled from the starting weights: every trained position is the sampled token, with
    # the server's logprob for it, recomputed here from those weights.
    gap = worst_logprob_gap(trained_groups(home.run_dir(start.run_id))[1], embedded_chat_model_dir(), temperature=1.0)
    assert gap <= LOGPROB_TOLERANCE, f"a kept logprob differs from the model's by {gap}"
    samples = "\n".join(str(run(rl_get_samples(start.run_id, step, n=100))) for step in (1, 2))
    assert "[tool call] calculate" in samples
    rows = [row.values for row in read_all_metrics(home.run_paths(start.run_id).env_metrics)]
    assert any(row.get(ENV_TURNS_MEAN, 0) > 1 for row in rows), rows  # multi-turn: a tool call, then more
    assert any(EVAL_PERCENT_CORRECT in row for row in rows), rows  # the held-out split, evaluated by default


def test_a_crashing_reward_ends_the_run_in_one_message_with_the_log_tail(verifiers_python: Path) -> None:
    run(rl_select_environment("broken_verifiers"))
    # Every group fails alike here (each a few seconds of chat programs): three in a row end the run as twenty
    # (the default) would, sooner.
    run(rl_edit_config({**SHORT, "max_consecutive_failures": 3}))

    start = run(rl_start_training(total_steps=2))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, RUN_TIMEOUT_S)

    assert status.status == "failed" and status.failed_process == "env"
    assert status.error is not None and "3 groups failed in a row" in status.error
    assert "the broken reward crashed on purpose" in status.error
    assert "last lines of the log" in status.error  # the environment's log tail, where each group's error is
