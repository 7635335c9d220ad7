"""Loading an environment class from a file, and building its config from a run's ``RunConfig``.

The config is the class's ``config_init()`` defaults overlaid with ``RunConfig.env`` and validated by the class's
``env_config_cls``; the locked fields come from the run's infrastructure (where the API and the inference server
listen, which tokenizer the trainer uses), whatever the file or the user said.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

from pydantic import ValidationError

from hermes_nb.config import RunConfig, format_validation_error
from hermes_nb.env.base import BaseEnv
from hermes_nb.env.config import APIServerConfig, BaseEnvConfig
from hermes_nb.errors import ConfigError, EnvironmentLoadError


def split_spec(spec: str) -> tuple[Path, str | None]:
    """``path/to/file.py[:ClassName]`` -> (path, class name or None)."""
    path, sep, class_name = spec.rpartition(":")
    if sep and path.endswith(".py") and class_name.isidentifier():
        return Path(path).expanduser(), class_name
    return Path(spec).expanduser(), None


def load_env_class(spec: str) -> type[BaseEnv]:
    """The ``BaseEnv`` subclass named by ``spec``; the name may be left out when the file defines exactly one."""
    path, class_name = split_spec(spec)
    module = import_file(path)
    candidates = {
        name: obj
        for name, obj in vars(module).items()
        if inspect.isclass(obj)
        and issubclass(obj, BaseEnv)
        and obj.__module__ == module.__name__
        and not inspect.isabstract(obj)
    }
    if class_name is not None:
        if class_name not in candidates:
            found = ", ".join(sorted(candidates)) or "none"
            raise EnvironmentLoadError(f"{path}: no BaseEnv subclass named {class_name} (found: {found})")
        return candidates[class_name]
    if len(candidates) != 1:
        found = ", ".join(sorted(candidates)) or "none"
        raise EnvironmentLoadError(
            f"{path}: expected exactly one BaseEnv subclass, found {found}; name one as {path}:ClassName"
        )
    return next(iter(candidates.values()))


def import_file(path: Path) -> ModuleType:
    """Import ``path`` as a module whose name is unique per absolute path (two ``env.py`` files never clash)."""
    path = path.resolve()
    if not path.is_file():
        raise EnvironmentLoadError(f"environment file {path} does not exist")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    name = f"hermes_nb_user_env_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise EnvironmentLoadError(f"{path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    # Registered before executing: pydantic and dataclasses look their module up while the class is created.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise EnvironmentLoadError(f"{path}: importing it failed: {type(exc).__name__}: {exc}") from exc
    return module


def build_env_config(env_cls: type[BaseEnv], run_config: RunConfig) -> tuple[BaseEnvConfig, list[APIServerConfig]]:
    """Defaults < ``run_config.env`` < locked infrastructure, validated by ``env_cls.env_config_cls``."""
    defaults, server_configs = env_cls.config_init()
    values = {**defaults.model_dump(), **run_config.env, **_locked_values(run_config)}
    try:
        config = env_cls.env_config_cls.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(f"env config of {env_cls.__name__}: {format_validation_error(exc)}") from None
    return config, _server_configs(server_configs, run_config)


def _locked_values(run_config: RunConfig) -> dict[str, str]:
    infra = run_config.infra
    locked: dict[str, str] = {}
    if infra.api_url:
        locked["rollout_server_url"] = infra.api_url
    tokenizer = infra.tokenizer_name or run_config.trainer.base_model
    if tokenizer:
        locked["tokenizer_name"] = tokenizer
    return locked


def _server_configs(server_configs: list[APIServerConfig], run_config: RunConfig) -> list[APIServerConfig]:
    """The first server is the run's inference server; any others the environment declared stay as they are."""
    configs = list(server_configs) or [APIServerConfig()]
    url = run_config.infra.inference_url
    if url:
        configs[0] = configs[0].model_copy(update={"base_url": openai_base_url(url)})
    return configs


def openai_base_url(url: str) -> str:
    """``http://host:port`` or ``http://host:port/v1`` -> ``http://host:port/v1``."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def make_env(env_cls: type[BaseEnv], run_config: RunConfig) -> BaseEnv:
    config, server_configs = build_env_config(env_cls, run_config)
    return env_cls(config, server_configs)
