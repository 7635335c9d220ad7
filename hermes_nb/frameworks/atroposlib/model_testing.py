"""How ``rl_test_inference`` runs an atroposlib environment: atroposlib's own ``process`` command, against one
model under test.

Per model, the test runs ``<environment Python> -m hermes_nb.frameworks.atroposlib.model_testing_bridge FILE CLASS
--rows PATH -- process --config YAML``. The YAML is how atroposlib takes settings, as for ``serve`` (``serve.py``):

- ``env``: the run's config values (``config_init()`` with the user's edits) with the test's ``group_size``, its
  number of groups as ``total_steps`` (what ``process`` collects), the run's tokenizer, W&B off, and
  atroposlib's own groups file (``data_path_to_save_groups``, with the HTML page it makes of it) beside the
  test's files;
- ``openai``: the model's URL at the test's gateway, which takes no key of its own: a local model's server as a
  vLLM server (as in a run: ``managed_server`` gets exact tokens and logprobs through its ``/generate``); an
  endpoint as an OpenAI one, with atroposlib's stand-in ``managed_server`` allowed
  (``ATROPOS_ALLOW_DUMMY_MANAGED_SERVER``: placeholder tokens, fine for groups that are only scored).

The bridge writes each scored group again as a row of the test's groups file, marked test-only, which is what
the report reads; nothing of a test reaches a trainer.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hermes_nb.config import RunConfig, base_model_dir
from hermes_nb.errors import ConfigError
from hermes_nb.frameworks.atroposlib.serve import SERVED_MODEL_NAME, VLLM_SERVER_TYPE
from hermes_nb.protocol.inference import openai_base_url
from hermes_nb.system.side_python import env_python_environment

MODEL_TESTING_BRIDGE_MODULE = "hermes_nb.frameworks.atroposlib.model_testing_bridge"
# The gateway checks no key; atroposlib's OpenAI client insists on one.
GATEWAY_API_KEY = "none"


def process_settings(
    config: RunConfig,
    *,
    num_groups: int,
    group_size: int,
    model_url: str,
    model_name: str | None,
    local: bool,
    groups_file: Path,
) -> dict[str, Any]:
    """The ``--config`` YAML's content: atroposlib's ``env`` and ``openai`` sections for one model's test."""
    tokenizer = str(base_model_dir(config.trainer.base_model))
    env = {
        **config.env,
        "group_size": group_size,
        "total_steps": num_groups,
        "tokenizer_name": tokenizer,
        "use_wandb": False,
        "data_path_to_save_groups": str(groups_file),
        "ensure_scores_are_not_same": False,  # every group is worth looking at, as in hermes-nb's process mode
    }
    openai = {
        "base_url": openai_base_url(model_url),
        "model_name": model_name or SERVED_MODEL_NAME,
        "server_type": VLLM_SERVER_TYPE if local else "openai",
        "health_check": False,  # the gateway is up before the environment starts
        "tokenizer_name": tokenizer,
        "api_key": GATEWAY_API_KEY,
    }
    return {"env": env, "openai": openai}


def process_argv(config: RunConfig, python: str, settings_file: Path, rows: Path) -> list[str]:
    """The command that tests the environment with the settings in ``settings_file``."""
    ref = config.environment
    if ref is None:
        raise ConfigError("no environment selected: call rl_select_environment(name) first")
    bridge = [python, "-m", MODEL_TESTING_BRIDGE_MODULE, ref.file, ref.class_name, "--rows", str(rows)]
    return [*bridge, "--", "process", "--config", str(settings_file)]


def process_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``hermes_nb`` importable by the environment Python; W&B off (atroposlib's ``process`` would turn it on);
    ``managed_server`` allowed on an endpoint, as a stand-in."""
    return {**env_python_environment(base), "WANDB_MODE": "disabled", "ATROPOS_ALLOW_DUMMY_MANAGED_SERVER": "1"}
