"""Environments as their frameworks' scaffolds make them (tests/scaffolds.py: ``openenv init``'s package with a
two-step typed-Action episode and one with an MCP tool, a ``vf-init`` project with a held-out split), each listed
by its framework's name, and the ``vf-init`` project installed with pip into the verifiers Python (beside a project
of the same id on the path: selected by its qualified name), each selected, trained to ``completed`` on the
embedded chat model on exactly the tokens it sampled (a verifiers one evaluated on its held-out split), and tested
with ``rl_test_inference``. The frameworks live in their side environments (``side_env_python`` skips where
absent)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from run_helpers import run, wait_for_status
from sampled_logprobs import LOGPROB_TOLERANCE, trained_groups, worst_logprob_gap
from scaffolds import addition_vf, python_with_installed, tools_openenv, two_step_openenv
from side_envs import side_env_python
from transformers import AutoTokenizer

from hermes_nb.api import (
    rl_edit_config,
    rl_get_results,
    rl_list_environments,
    rl_select_environment,
    rl_start_training,
    rl_stop_training,
    rl_test_inference,
)
from hermes_nb.config import embedded_chat_model_dir
from hermes_nb.frameworks.openenv.interpreter import OPENENV_PYTHON_VAR
from hermes_nb.frameworks.verifiers.interpreter import VERIFIERS_PYTHON_VAR
from hermes_nb.protocol.metrics import EVAL_PERCENT_CORRECT
from hermes_nb.runs.run_dirs import known_run_ids
from hermes_nb.selection.current import current_state
from hermes_nb.system import home

RUN_TIMEOUT_S = 300
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(3 * RUN_TIMEOUT_S)]
SHORT = {"group_size": 2, "batch_size": 4, "eval_items": 2, "max_num_workers": 2, "wandb.mode": "disabled"}
# The embedded model rarely scores: flat groups are kept (advantage 0) so a short run moves.
KEEP_FLAT_GROUPS = {"ensure_scores_are_not_same": False}
# The embedded model's context is 128 tokens: two turns of the echo episode fit with short replies. A verifiers
# run evaluates the vf-init project's held-out split.
SETTINGS = {"openenv": {"max_turn_tokens": 16}, "verifiers": {"env.eval_taskset": {"split": "held_out"}}}


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scaffolded packages in one folder, made once: a run reads them and writes nothing there."""
    folder = tmp_path_factory.mktemp("scaffolded")
    two_step_openenv(folder)
    tools_openenv(folder)
    addition_vf(folder)
    return folder


@pytest.fixture
def scaffolded(packages: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The scaffolded packages' folder on the environments path, both side Pythons; runs stopped."""
    monkeypatch.setenv(OPENENV_PYTHON_VAR, str(side_env_python("openenv")))
    monkeypatch.setenv(VERIFIERS_PYTHON_VAR, str(side_env_python("verifiers")))
    monkeypatch.setenv(home.ENV_PATH_VAR, str(packages))
    yield packages
    for run_id in known_run_ids():
        run(rl_stop_training(run_id))


@pytest.mark.parametrize(("name", "framework"), [("two_step", "openenv"), ("peer-addition", "verifiers")])
def test_a_scaffolded_package_is_listed_trained_on_its_sampled_tokens_and_tested(
    scaffolded: Path, name: str, framework: str
) -> None:
    _listed_trained_and_tested(name, framework)


def test_an_openenv_init_package_with_an_mcp_tool_offers_it_and_is_listed_trained_and_tested(
    scaffolded: Path,
) -> None:
    run_id = _listed_trained_and_tested("echo_tools", "openenv")

    tokenizer = AutoTokenizer.from_pretrained(embedded_chat_model_dir())
    prompt = tokenizer.decode(trained_groups(home.run_dir(run_id))[1][0].tokens[0])
    assert '"shout"' in prompt  # the session's MCP tool, offered to the policy in its chat template


def test_a_package_installed_into_the_verifiers_python_is_listed_by_its_id_trained_and_tested(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = python_with_installed(addition_vf(tmp_path / "src", "installed-addition"), tmp_path / "venv")
    addition_vf(tmp_path / "elsewhere", "installed-addition")  # the same id on the path: both listed
    monkeypatch.setenv(VERIFIERS_PYTHON_VAR, str(python))
    monkeypatch.setenv(home.ENV_PATH_VAR, str(tmp_path / "elsewhere"))
    try:
        listed = [e for e in run(rl_list_environments()).environments if e.name == "installed-addition"]
        [installed] = [e for e in listed if "site-packages" in e.origin]
        assert len(listed) == 2 and installed.shared
        _listed_trained_and_tested(installed.qualified_name, "verifiers")
        selected = current_state().environment
        assert selected is not None and selected.file == installed.file
    finally:
        for run_id in known_run_ids():
            run(rl_stop_training(run_id))


def _listed_trained_and_tested(name: str, framework: str) -> str:
    """Select ``name`` (as the listing names it), train it to completed on its sampled tokens, test it; the run."""
    listed = {env.selector: env.framework for env in run(rl_list_environments()).environments}
    assert listed.get(name) == framework

    run(rl_select_environment(name))
    run(rl_edit_config({**SHORT, **KEEP_FLAT_GROUPS, **SETTINGS[framework]}))
    start = run(rl_start_training(total_steps=2))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, RUN_TIMEOUT_S)

    assert status.status == "completed", status.error
    first_groups = trained_groups(home.run_dir(start.run_id))[1]
    gap = worst_logprob_gap(first_groups, embedded_chat_model_dir(), temperature=1.0)
    assert gap <= LOGPROB_TOLERANCE, f"a kept logprob differs from the model's by {gap}"

    if framework == "verifiers":  # the held-out split was evaluated: its accuracy is the run's eval metric
        held_out = run(rl_get_results(start.run_id)).final_metrics.get(EVAL_PERCENT_CORRECT)
        assert held_out is not None and 0.0 <= held_out <= 1.0

    tested = run(rl_test_inference(num_steps=1, group_size=2, models="embedded-chat"))
    [result] = tested.results
    assert result.status == "ok", result.error
    assert result.completions == 2
    return start.run_id
