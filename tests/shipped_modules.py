"""A shipped environment's module, loaded from its file for a test that needs its names (a prompt, a tool)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from types import ModuleType

from hermes_nb.system.home import shipped_environments_dir


@functools.cache
def shipped_module(stem: str) -> ModuleType:
    """``environments/<stem>.py`` as the module ``shipped_<stem>`` (registered, as its dataclasses need)."""
    spec = importlib.util.spec_from_file_location(f"shipped_{stem}", shipped_environments_dir() / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
