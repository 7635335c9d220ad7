"""How a run starts an atroposlib environment: atroposlib's own ``serve`` command, fed the run's settings.

The supervisor runs ``<environment Python> -m hermes_nb.frameworks.atroposlib.bridge FILE CLASS ... -- serve
--config YAML``; the bridge passes ``serve --config YAML`` to the class's ``cli()``, as ``python FILE serve
--config YAML`` would. The YAML (``<run>/atropos_serve.yaml``) is how atroposlib takes settings: its ``env:``
section is merged over the class's ``config_init()`` and its ``openai:`` section over the declared server, each
validated by atroposlib's own models. The run decides there what it decides for any environment:

- ``env``: every value the run's config sets (``RunConfig.env``: the ``config_init()`` values with the user's
  edits, ``total_steps``, ``batch_size`` and ``group_size`` among them; an unset one is left out, so atroposlib's
  own default stands), ``wandb_name`` (the name it registers under: the class's ``name`` when it sets none),
  and the locked fields set by the run:
  ``rollout_server_url`` (the run's trajectory API), ``tokenizer_name`` (the trainer's model directory),
  ``data_path_to_save_groups`` (none), and ``use_wandb``, on only when the environment's own setting and the
  run's W&B mode both are (atroposlib then reads the project and group from the API's ``/wandb_info``).
- ``openai``: the run's inference server (``base_url``), as a vLLM server (``server_type: vllm``): it serves
  OpenAI's completions and chat, and vLLM's ``/generate`` on token ids with their logprobs, which is what
  atroposlib's ``managed_server`` samples through (on an OpenAI server it refuses to run); no health probe, since
  the supervisor waited for the server's ``/health`` already and a probe per second would take sampling time.

W&B's mode, directory and entity reach the process as atroposlib's ``wandb`` reads them, through ``WANDB_*``
variables; keys reach it only through the environment variables it inherits.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from hermes_nb.config import RunConfig
from hermes_nb.errors import ConfigError
from hermes_nb.frameworks.atroposlib.interpreter import configured_python
from hermes_nb.metrics.logger import resolve_wandb_mode
from hermes_nb.protocol.auth import capability_url
from hermes_nb.protocol.inference import openai_base_url
from hermes_nb.protocol.run_files import ATROPOS_SERVE_FILE, RunPaths
from hermes_nb.system.side_python import env_python_environment

BRIDGE_MODULE = "hermes_nb.frameworks.atroposlib.bridge"
# The model name sent to the run's inference server, which serves one policy under any name.
SERVED_MODEL_NAME = "policy"
# atroposlib's name for a server that answers vLLM's /generate as well as OpenAI's routes, as hermes-nb's does.
VLLM_SERVER_TYPE = "vllm"


def wandb_enabled(config: RunConfig) -> bool:
    """The environment logs to W&B only when it wants to (``use_wandb``) and the run's W&B is not disabled."""
    return bool(config.env.get("use_wandb", False)) and resolve_wandb_mode(config.wandb.mode) != "disabled"


def serve_settings(config: RunConfig, secret: str | None = None, api_secret: str | None = None) -> dict[str, Any]:
    """The ``--config`` YAML's content: atroposlib's ``env`` and ``openai`` sections for this run. atroposlib takes
    only URLs and an API key, so the run's secret goes in as the trajectory API's capability URL (``api_secret``:
    none for an external API) and as the inference server's API key."""
    infra = config.infra
    # Only what is set: a null would override what atroposlib itself decides for an unset field.
    env = {
        **{name: value for name, value in config.env.items() if value is not None},
        "wandb_name": registered_name(config),
        "rollout_server_url": capability_url(infra.api_url or "", api_secret),
        "tokenizer_name": infra.tokenizer_name,
        "data_path_to_save_groups": None,
        "use_wandb": wandb_enabled(config),
    }
    openai = {
        "base_url": openai_base_url(infra.inference_url or ""),
        "model_name": SERVED_MODEL_NAME,
        "server_type": VLLM_SERVER_TYPE,
        "health_check": False,
        "tokenizer_name": infra.tokenizer_name,
    }
    if secret:
        openai["api_key"] = secret
    return {"env": env, "openai": openai}


def settings_path(paths: RunPaths) -> Path:
    """Where the run's serve settings are written (mode 0600: they hold the run's secret)."""
    return paths.run_dir / ATROPOS_SERVE_FILE


def settings_text(config: RunConfig, secret: str | None = None, api_secret: str | None = None) -> str:
    return yaml_text(serve_settings(config, secret, api_secret))


def yaml_text(settings: Mapping[str, Any]) -> str:
    """``settings`` as the YAML atroposlib's ``--config`` reads, in the order written."""
    return yaml.safe_dump(dict(settings), sort_keys=False)


def registered_name(config: RunConfig) -> str:
    """The name the environment registers under (``wandb_name``, sent to ``/register-env``, which needs one):
    its own setting, else the class's ``name``, as atroposlib's ``serve`` means to fill an unset one (its fill-in
    sets an attribute of the CLI object that its config merge never reads, so an unset name stays null)."""
    name = config.env.get("wandb_name")
    if isinstance(name, str) and name:
        return name
    ref = config.environment
    if ref is None:
        raise ConfigError("no environment selected: call rl_select_environment(name) first")
    return ref.name


def serve_argv(config: RunConfig, paths: RunPaths) -> list[str]:
    """The command that serves the environment with the settings at ``settings_path(paths)``."""
    ref = config.environment
    if ref is None:
        raise ConfigError("no environment selected: call rl_select_environment(name) first")
    python = config.infra.env_python or configured_python()
    bridge_options = [
        "--metrics",
        str(paths.env_metrics),
        "--api-url",
        config.infra.api_url or "",
        "--total-steps",
        str(int(config.env_value("total_steps"))),
    ]
    atroposlib_cli = ["serve", "--config", str(settings_path(paths))]
    return [python, "-m", BRIDGE_MODULE, ref.file, ref.class_name, *bridge_options, "--", *atroposlib_cli]


def serve_environment(config: RunConfig, base: Mapping[str, str]) -> dict[str, str]:
    """The process environment: ``hermes_nb`` importable by the environment Python, W&B as the run has it."""
    env = env_python_environment(base)
    if not wandb_enabled(config):
        env["WANDB_MODE"] = "disabled"
        return env
    env["WANDB_MODE"] = resolve_wandb_mode(config.wandb.mode)
    # wandb.init in atroposlib names no directory: its files go with the run's, not into the working directory.
    env["WANDB_DIR"] = config.infra.run_dir or os.getcwd()
    if config.wandb.entity:
        env["WANDB_ENTITY"] = config.wandb.entity
    return env
