"""Throwaway environment files for the core tests (discovery, schema, editing, API, CLI)."""

from __future__ import annotations

import textwrap
from pathlib import Path

SIMPLE_ENV = '''
"""Module docstring of the simple environment."""
from typing import Literal

from pydantic import Field

from hermes_nb.env import APIServerConfig, BaseEnv, BaseEnvConfig


class SimpleConfig(BaseEnvConfig):
    digits: int = Field(default=2, ge=1, le=6, description="Operands have at most this many digits.")
    operation: Literal["add", "sub", "mixed"] = Field(default="add", description="Which operation.")
    label: str | None = Field(default=None, description="Free text.")


class SimpleEnv(BaseEnv):
    """Add two numbers.

    A longer description that is not the first line.
    """

    name = "simple"
    env_config_cls = SimpleConfig

    @classmethod
    def config_init(cls):
        return SimpleConfig(group_size=8, digits=3), [APIServerConfig(model_name="policy-x")]

    async def get_next_item(self):
        raise NotImplementedError

    async def collect_trajectories(self, item):
        raise NotImplementedError
'''


def write_env(directory: Path, filename: str, source: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / filename
    path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    return path


def env_class(name: str, base: str = "BaseEnv", env_name: str | None = None, doc: str = "") -> str:
    """A minimal environment class body; ``base`` is the base expression as written in the file."""
    lines = [f"class {name}({base}):"]
    if doc:
        lines.append(f'    """{doc}"""')
    if env_name:
        lines.append(f"    name = {env_name!r}")
    lines.append("    async def get_next_item(self):\n        raise NotImplementedError")
    lines.append("    async def collect_trajectories(self, item):\n        raise NotImplementedError")
    return "\n".join(lines) + "\n"
