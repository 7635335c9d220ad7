"""Environment packages as the frameworks' own scaffolds make them: ``openenv init`` and ``vf-init``, run from
the side environments that hold those frameworks (``side_env_python`` skips where one is absent), then edited the
way their generated comments tell a user to: the environment's logic, nothing of the layout.

``two_step_openenv`` is OpenEnv's generated echo environment whose episode ends after its second typed Action;
``tools_openenv`` the same package with its environment an ``MCPEnvironment`` offering one tool;
``addition_vf`` is a ``vf-init`` package whose taskset is two-digit addition with a held-out split.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from side_envs import side_env_python

# The generated echo step never ends an episode; a user's environment says when it is done.
ECHO_STEP_END = "            done=False,\n            reward=reward,\n            metadata="
TWO_STEP_END = "            done=self._state.step_count >= 2,\n            reward=reward,\n            metadata="


def _side_command(framework: str, command: str) -> str:
    return str(side_env_python(framework).parent / command)


def openenv_init(name: str, parent: Path) -> Path:
    """The package ``openenv init NAME`` writes under ``parent``."""
    subprocess.run([_side_command("openenv", "openenv"), "init", name, "-o", str(parent)], check=True,
                   capture_output=True)  # fmt: skip
    return parent / name


def vf_init(env_id: str, parent: Path) -> Path:
    """The project ``vf-init ENV_ID`` writes under ``parent`` (its folder is the id as a module name)."""
    subprocess.run([_side_command("verifiers", "vf-init"), env_id, "--path", str(parent)], check=True,
                   capture_output=True)  # fmt: skip
    return parent / env_id.replace("-", "_")


def two_step_openenv(parent: Path, name: str = "two_step") -> Path:
    package = openenv_init(name, parent)
    environment = package / "server" / f"{name}_environment.py"
    source = environment.read_text(encoding="utf-8")
    assert ECHO_STEP_END in source, "openenv init's echo environment changed: update the edit"
    environment.write_text(source.replace(ECHO_STEP_END, TWO_STEP_END), encoding="utf-8")
    return package


# An `openenv init` environment with MCP tools, as OpenEnv's MCP environments are written: an MCPEnvironment
# whose FastMCP server holds the tools (a session's tools/call), the scaffold's typed Action ending the episode.
TOOLS_ENVIRONMENT = '''"""Echo with an MCP tool, ``shout``; the first Action ends the episode."""

from typing import Any, Optional
from uuid import uuid4

from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import Action, State

try:
    from ..models import {Prefix}Action, {Prefix}Observation
except ImportError:
    from models import {Prefix}Action, {Prefix}Observation


class {Prefix}Environment(MCPEnvironment):
    """Say hi, in capitals if you like: the MCP tool ``shout`` capitalises; the first Action ends the episode."""

    SUPPORTS_CONCURRENT_SESSIONS: bool = True

    def __init__(self):
        mcp = FastMCP("{name}")

        @mcp.tool(name="shout")
        def shout(text: str) -> str:
            """The text in capitals."""
            return text.upper()

        super().__init__(mcp)
        self._state = State(episode_id=str(uuid4()), step_count=0)

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any) -> {Prefix}Observation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return {Prefix}Observation(echoed_message="Say HI.", message_length=0, done=False, reward=0.0)

    def _step_impl(self, action: Action, timeout_s: Optional[float] = None, **kwargs: Any) -> {Prefix}Observation:
        self._state.step_count += 1
        message = str(getattr(action, "message", ""))
        reward = float(message.strip() == "HI")
        return {Prefix}Observation(echoed_message=message, message_length=len(message), done=True, reward=reward)

    @property
    def state(self) -> State:
        return self._state
'''
GENERATED_CLASS = re.compile(r"^class (\w+)Environment\(Environment\):", re.MULTILINE)


def tools_openenv(parent: Path, name: str = "echo_tools") -> Path:
    """``openenv init NAME`` with its environment made an MCP one (a ``shout`` tool); models, app and manifest
    as generated."""
    package = openenv_init(name, parent)
    environment = package / "server" / f"{name}_environment.py"
    generated = GENERATED_CLASS.search(environment.read_text(encoding="utf-8"))
    assert generated is not None, "openenv init's environment class changed: update the edit"
    environment.write_text(TOOLS_ENVIRONMENT.format(Prefix=generated.group(1), name=name), encoding="utf-8")
    return package


ADDITION_TASKSET = '''"""Two-digit addition, every tenth pair held out."""

import random
from typing import Literal

import verifiers.v1 as vf

HELD_OUT_EVERY = 10


class {Prefix}Data(vf.TaskData):
    answer: str


class {Prefix}Task(vf.Task[{Prefix}Data]):
    @vf.reward(weight=1.0)
    async def reward(self, trace: vf.Trace) -> float:
        return 1.0 if trace.last_reply == self.data.answer else 0.0


class {Prefix}Config(vf.TasksetConfig):
    split: Literal["train", "held_out"] = "train"
    seed: int = 0


class {Prefix}Taskset(vf.Taskset[{Prefix}Task, {Prefix}Config]):
    """Two-digit addition with a held-out split."""

    def load(self) -> list[{Prefix}Task]:
        held_out = self.config.split == "held_out"
        indices = [i for i in range(100 * 100) if (i % HELD_OUT_EVERY == 0) == held_out]
        random.Random(self.config.seed).shuffle(indices)
        tasks = []
        for index in indices:
            a, b = divmod(index, 100)
            data = {Prefix}Data(prompt=f"{{a}}+{{b}}=", answer=str(a + b), id=f"{{a}}+{{b}}")
            tasks.append({Prefix}Task(data, self.config.task))
        return tasks
'''


def addition_vf(parent: Path, env_id: str = "peer-addition") -> Path:
    project = vf_init(env_id, parent)
    module = env_id.replace("-", "_")
    prefix = "".join(part.title() for part in module.split("_"))
    taskset = project / module / "taskset.py"
    assert f"class {prefix}Taskset(" in taskset.read_text(encoding="utf-8"), "vf-init's naming changed"
    taskset.write_text(ADDITION_TASKSET.format(Prefix=prefix), encoding="utf-8")
    return project


def python_with_installed(project: Path, venv: Path) -> Path:
    """A Python with verifiers (the side environment's packages, through a ``.pth``) into which ``project`` is
    installed with pip, as a user installs an environment: the shared side environment is left as it is. pip
    builds the project in isolation, so it fetches vf-init's build backend (hatchling) from the package index."""
    base = side_env_python("verifiers")
    subprocess.run([str(base), "-m", "venv", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    side = subprocess.run([str(base), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    (Path(purelib) / "side_environment.pth").write_text(side + "\n", encoding="utf-8")
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(project)], check=True, capture_output=True)
    return python
