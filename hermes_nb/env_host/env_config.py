"""An environment's config for one run, built from the run's ``RunConfig``.

The config is the class's ``config_init()`` defaults overlaid with ``RunConfig.env`` and validated by the class's
``env_config_cls``; the locked fields come from the run's infrastructure (where the API and the inference server
listen, which tokenizer the trainer uses), whatever the file or the user said. The class is given, never looked
up here (``hermes_nb.env_host.loading`` finds it).
"""

from __future__ import annotations

from pydantic import ValidationError

from hermes_nb.config import BaseEnvConfig, RunConfig, format_validation_error, locked_env_values
from hermes_nb.env.base import BaseEnv
from hermes_nb.env.server_config import APIServerConfig
from hermes_nb.errors import ConfigError
from hermes_nb.protocol.auth import SECRET_ENV
from hermes_nb.protocol.inference import openai_base_url


def build_env_config(env_cls: type[BaseEnv], run_config: RunConfig) -> tuple[BaseEnvConfig, list[APIServerConfig]]:
    """Defaults < ``run_config.env`` < locked infrastructure, validated by ``env_cls.env_config_cls``."""
    defaults, server_configs = env_cls.config_init()
    locked = locked_env_values(run_config.infra, run_config.trainer.base_model)
    values = {**defaults.model_dump(), **run_config.env, **locked}
    try:
        config = env_cls.env_config_cls.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(f"env config of {env_cls.__name__}: {format_validation_error(exc)}") from None
    return config, _server_configs(server_configs, run_config)


def _server_configs(server_configs: list[APIServerConfig], run_config: RunConfig) -> list[APIServerConfig]:
    """The first server is the run's inference server; any others the environment declared stay as they are."""
    configs = list(server_configs) or [APIServerConfig()]
    url = run_config.infra.inference_url
    if url:
        # The run's inference server requires the run's secret, which its processes hold in SECRET_ENV.
        update = {"base_url": openai_base_url(url), "api_key_env": SECRET_ENV}
        configs[0] = configs[0].model_copy(update=update)
    return configs
