"""The environment frameworks hermes-nb knows: one line per shipped adapter, plus those registered from outside.

A framework defined outside the package is registered by naming its adapter as ``module:attribute`` (an instance
of ``FrameworkAdapter``, or a subclass to instantiate), either

- in the environment variable ``HERMES_NB_FRAMEWORKS`` (several separated by commas), which every process of a
  run inherits from the process that started it, or
- as an entry point of the group ``hermes_nb.frameworks`` in an installed distribution's metadata
  (``[project.entry-points."hermes_nb.frameworks"] name = "module:attribute"``), seen by every interpreter that
  has the distribution installed.

A framework's name is what ``EnvironmentRef.framework`` holds: a name no adapter has is refused with the names
that are registered.
"""

from __future__ import annotations

import importlib
import os
import threading
from importlib.metadata import entry_points

from hermes_nb.config import DEFAULT_FRAMEWORK
from hermes_nb.errors import ConfigError
from hermes_nb.frameworks.atroposlib.adapter import AtroposlibFramework
from hermes_nb.frameworks.contract import FrameworkAdapter
from hermes_nb.frameworks.native.adapter import NativeFramework
from hermes_nb.frameworks.openenv.adapter import OpenEnvFramework
from hermes_nb.frameworks.verifiers.adapter import VerifiersFramework

FRAMEWORKS_VAR = "HERMES_NB_FRAMEWORKS"
ENTRY_POINT_GROUP = "hermes_nb.frameworks"

# The shipped adapters, one line each. hermes-nb's own (DEFAULT_FRAMEWORK) also claims an environment whose root
# base no adapter claims by package.
SHIPPED: tuple[FrameworkAdapter, ...] = (
    NativeFramework(),
    AtroposlibFramework(),
    OpenEnvFramework(),
    VerifiersFramework(),
)

# Adapters from outside, by the value of FRAMEWORKS_VAR they were loaded for (a test or a kernel may change it).
_LOADED: dict[str, tuple[FrameworkAdapter, ...]] = {}
_LOCK = threading.Lock()


def adapters() -> tuple[FrameworkAdapter, ...]:
    """Every registered adapter: the shipped ones, then entry points, then ``HERMES_NB_FRAMEWORKS``'s."""
    spec = os.environ.get(FRAMEWORKS_VAR, "").strip()
    with _LOCK:
        if spec not in _LOADED:
            _LOADED[spec] = (*SHIPPED, *_from_entry_points(), *_from_variable(spec))
        return _LOADED[spec]


def adapter(name: str) -> FrameworkAdapter:
    """The adapter of the framework ``name``; ``ConfigError`` naming the registered ones when none has it."""
    for found in adapters():
        if found.name == name:
            return found
    known = ", ".join(a.name for a in adapters())
    raise ConfigError(
        f"environment.framework: no framework {name!r} is registered (registered: {known}); register its "
        f"adapter with {FRAMEWORKS_VAR}=module:attribute or an entry point of the group {ENTRY_POINT_GROUP!r}"
    )


def names() -> list[str]:
    return [a.name for a in adapters()]


def _from_entry_points() -> list[FrameworkAdapter]:
    points = entry_points(group=ENTRY_POINT_GROUP)
    return [_checked(point.load(), f"entry point {point.name} = {point.value}") for point in points]


def _from_variable(spec: str) -> list[FrameworkAdapter]:
    found = []
    for entry in (part.strip() for part in spec.split(",")):
        if not entry:
            continue
        module, sep, attribute = entry.partition(":")
        if not sep or not module or not attribute:
            raise ConfigError(f"{FRAMEWORKS_VAR}: {entry!r} is not module:attribute")
        try:
            value = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"{FRAMEWORKS_VAR}: {entry!r} cannot be loaded: {exc}") from None
        found.append(_checked(value, f"{FRAMEWORKS_VAR} entry {entry!r}"))
    return found


def _checked(value: object, where: str) -> FrameworkAdapter:
    if isinstance(value, type) and issubclass(value, FrameworkAdapter):
        value = value()
    if not isinstance(value, FrameworkAdapter):
        raise ConfigError(f"{where}: {value!r} is not a hermes_nb.frameworks.contract.FrameworkAdapter")
    return value


__all__ = ["DEFAULT_FRAMEWORK", "ENTRY_POINT_GROUP", "FRAMEWORKS_VAR", "SHIPPED", "adapter", "adapters", "names"]
