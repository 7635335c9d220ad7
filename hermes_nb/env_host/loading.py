"""Loading an environment class from a file (``path/to/env.py[:ClassName]``), and making one for a run.

In the package only ``python -m hermes_nb.env_host`` (``hermes_nb.env_host.__main__``) resolves a file. The
config an instance gets is built by ``hermes_nb.env_host.env_config``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

from hermes_nb.config import RunConfig
from hermes_nb.env.base import BaseEnv
from hermes_nb.env_host.env_config import build_env_config
from hermes_nb.errors import EnvironmentLoadError


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


def make_env(env_cls: type[BaseEnv], run_config: RunConfig) -> BaseEnv:
    """An instance of ``env_cls`` configured for the run."""
    config, server_configs = build_env_config(env_cls, run_config)
    return env_cls(config, server_configs)
