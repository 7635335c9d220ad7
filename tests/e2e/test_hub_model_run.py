"""A run whose ``trainer.base_model`` is a hub id, from a hub cache laid out as huggingface_hub lays it out, offline:
the id is resolved once before the run starts, and every process reads the snapshot its config.yaml records."""

from __future__ import annotations

from pathlib import Path

import huggingface_hub.constants  # noqa: F401  (read before HF_HUB_OFFLINE is set here: see test_hub_models.py)
import pytest
from hub_standin import COMMIT, write_hub_cache
from run_helpers import run, wait_for_status

from hermes_nb.api import rl_start_training
from hermes_nb.config import RunConfig
from hermes_nb.system import home
from hermes_nb.testing import make_tiny_model

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("quick_env")]

# Two steps take well under a minute on an idle machine; a loaded one (other runs, the whole suite) slows it down.
COMPLETE_TIMEOUT = 300.0


def test_a_run_with_a_hub_id_from_an_offline_cache_completes_on_its_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot = write_hub_cache(tmp_path / "hub", "tiny-org/tiny-llama", make_tiny_model(tmp_path / "tiny"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    # A random model scores every sample alike: its groups are kept, or no batch would ever form.
    overrides = {"total_steps": 2, "ensure_scores_are_not_same": False, "trainer.base_model": "tiny-org/tiny-llama"}
    start = run(rl_start_training(**overrides))
    status = wait_for_status(start.run_id, lambda s: s.is_terminal, COMPLETE_TIMEOUT)

    assert status.status == "completed", status.error
    recorded = RunConfig.load(home.run_paths(start.run_id).config)
    assert recorded.trainer.base_model == str(snapshot) and COMMIT in recorded.trainer.base_model
    assert recorded.infra.tokenizer_name == str(snapshot)
