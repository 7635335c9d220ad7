"""``rl_test_inference`` on an environment written against atroposlib, run as it is: atroposlib's own ``process``
command in the environment Python (``.venvs/atropos``, built by ``make test``), against a provider on loopback that
behaves as hosted ones do (``fake_provider``: text only, ``usage``, one 429 with ``Retry-After``, ``n`` ignored, the
key checked) and against the run's own base model.

The environments are tests/fixtures/atropos/add_env.py (chat completions through atroposlib's server manager,
``tokenize_for_trainer``, scores of 1.0 and -1.0), its variant that samples through ``managed_server``
(add_env_managed.py: against the base model it gets exact tokens and logprobs from a local vLLM-type server) and
one whose ``setup`` crashes (add_env_failures.py).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_provider import SOLVER, fake_provider, right_and_wrong_tested, solve, use_key
from side_envs import REPO_ROOT, side_env_python

from hermes_nb import api
from hermes_nb.errors import EnvironmentPythonError
from hermes_nb.model_test.runner import rl_test_inference
from hermes_nb.protocol.run_files import INFERENCE_TESTS_DIR
from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.system import home

pytestmark = pytest.mark.timeout(300)

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "atropos"


def _select(name: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``name`` selected, read by the environment Python that has atroposlib; that Python."""
    python = side_env_python("atropos")
    monkeypatch.setenv(home.ENV_PATH_VAR, str(FIXTURES))
    monkeypatch.setenv(home.ENV_PYTHON_VAR, str(python))
    asyncio.run(api.rl_select_environment(name))
    return python


@pytest.fixture
def atropos_add(monkeypatch: pytest.MonkeyPatch) -> Path:
    return _select("atropos_add", monkeypatch)


def _rows(path: str | None) -> list[dict[str, Any]]:
    assert path is not None
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def test_an_atroposlib_environment_scores_a_right_provider_fully_and_a_wrong_one_not_at_all(
    atropos_add: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = use_key(monkeypatch)
    with fake_provider() as (url, state):
        result, right, wrong = right_and_wrong_tested(url)
    assert right.rate_limited == 1 and right.requests == len(state.calls_of(SOLVER))
    for model in (right, wrong):
        rows = _rows(model.output_file)
        assert all(ScoredDataGroup.model_validate(row["group"]).is_test_only() for row in rows)
        stem = Path(model.output_file or "").with_suffix("")
        assert len(Path(f"{stem}.atropos.jsonl").read_text().splitlines()) == 2  # atroposlib's own file, beside
    samples = [s for row in _rows(right.output_file) for s in row["samples"]]
    assert all(s["completion"].strip() == solve(s["prompt"] or "") and s["correct"] for s in samples)
    assert not [p for p in Path(result.output_dir).rglob("*") if p.is_file() and key in p.read_text(errors="replace")]


def test_a_crash_in_setup_is_that_models_failure_with_the_environments_own_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _select("atropos_add_crashing_setup", monkeypatch)
    use_key(monkeypatch)
    with fake_provider() as (url, _):
        result = asyncio.run(rl_test_inference(num_steps=1, group_size=2, models=[f"{url}#{SOLVER}"]))
    [model] = result.results
    assert model.status == "env_failed" and model.completions == 0
    assert "add_problems.jsonl: the problem set is missing" in (model.error or ""), model.error


def test_an_environment_python_without_atroposlib_is_refused_before_anything_is_written(
    atropos_add: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    python = bare / "python"
    python.symlink_to(sys.executable)  # hermes-nb's own Python, which has no atroposlib
    monkeypatch.setenv(home.ENV_PYTHON_VAR, str(python))
    tests_dir = home.home_dir() / INFERENCE_TESTS_DIR
    before = sorted(tests_dir.iterdir()) if tests_dir.is_dir() else []

    with pytest.raises(EnvironmentPythonError, match="cannot import") as refused:
        asyncio.run(rl_test_inference(num_steps=1, group_size=2, models=["embedded"]))

    assert "pip install atroposlib" in str(refused.value) and str(python) in str(refused.value)
    assert (sorted(tests_dir.iterdir()) if tests_dir.is_dir() else []) == before


def test_an_environment_sampling_through_managed_server_is_tested_against_an_endpoint_and_the_base_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _select("atropos_add_managed", monkeypatch)
    use_key(monkeypatch)
    with fake_provider() as (url, _):
        result = asyncio.run(rl_test_inference(num_steps=1, group_size=4, models=[f"{url}#{SOLVER}", "embedded"]))
    hosted, local = result.results
    assert (hosted.status, hosted.completions, hosted.accuracy) == ("ok", 4, 1.0), str(result)
    assert (local.status, local.completions) == ("ok", 4), str(result)
    [row] = _rows(local.output_file)
    group = ScoredDataGroup.model_validate(row["group"])
    assert group.is_test_only() and group.inference_logprobs is not None  # exact, from the local server
    sampled = [lp for lps, masks in zip(group.inference_logprobs, group.masks, strict=True)
               for lp, mask in zip(lps, masks, strict=True) if mask != -100]  # fmt: skip
    assert sampled and all(lp <= 0 for lp in sampled) and any(lp < 0 for lp in sampled)
