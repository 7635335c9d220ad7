"""The contract of an environment framework: what hermes-nb asks of an adapter, and the records it exchanges.

An environment is written against a framework (hermes-nb's own ``BaseEnv``, atroposlib's, ...). Everything that
depends on which one is the adapter's answer:

- ``recognition``: how discovery (an AST scan, nothing imported) knows the framework's environments: the root base
  classes it claims, by package and class name, and the mark shown before their description in listings;
- ``python(file)``: the interpreter that reads and runs them, checked (a missing framework is one error naming
  the interpreter and the install command, raised before anything is read or launched);
- ``schema_module`` and ``schema_environment``: the child that reads an environment's config schema in that
  interpreter (``python -m MODULE FILE CLASS``, the answer as ``hermes_nb.selection.schema_child`` prints it);
- ``selection_values`` and ``check_startable``: the run's starting values from ``config_init()``'s, and the
  sizes a start refuses; ``check_source``: an environment whose source needs what this machine lacks (a Docker
  image, a hosted server), refused before a run or a model test starts anything;
- ``serve(request)``: the environment process of a run (its command line, process environment and the files it
  reads), given the run's config (trajectory API and inference URLs, tokenizer, sizes, W&B) and secrets;
- ``model_test(request)``: the child ``rl_test_inference`` runs per model, writing the test's groups file;
- ``metric_names``: the framework's metric names that its environment process writes under the run's names.

This module imports no adapter; ``registry`` does.
"""

from __future__ import annotations

import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from hermes_nb.config import RunConfig
from hermes_nb.env.base import HOST_MODULE
from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.system import home
from hermes_nb.system.secrets import write_private

# The module every shipped adapter reads schemas with: it prints the ``EnvSchema`` answer.
SCHEMA_CHILD_MODULE = "hermes_nb.selection.schema_child"


class Recognition(BaseModel):
    """How discovery recognises the framework's environments in source it never imports."""

    model_config = ConfigDict(frozen=True)

    # The root base classes by class name, matched after a file's imports are resolved ("BaseEnv").
    base_classes: frozenset[str]
    # The packages those classes come from ("atroposlib"): ``atroposlib.envs.base.BaseEnv`` is claimed by the
    # adapter that names ``atroposlib``.
    packages: tuple[str, ...]
    # Also claims a root base no adapter claims by package (a star import, a relative or foreign import).
    claims_unqualified: bool = False
    # Shown before the description of its environments in listings ("[atroposlib] "); empty for none.
    mark: str = ""
    # Module-level functions a module of the framework may export instead of a root class (an older API's
    # ``load_environment``) that the adapter cannot run, and why: such a module is listed with that reason and
    # refused when selected.
    entry_functions: frozenset[str] = frozenset()
    entry_refusal: str = ""

    def claims(self, base: str) -> bool:
        """Whether the resolved base name ``base`` is one of this framework's root classes, by package."""
        package, _, short = base.rpartition(".")
        return short in self.base_classes and package.split(".")[0] in self.packages


class FileToWrite(BaseModel):
    """A file a child reads (its settings), written before it starts, mode 0600: it may hold the run's secret."""

    path: Path
    text: str

    def write(self) -> None:
        write_private(self.path, self.text)


class ChildCommand(BaseModel):
    """How to start one child: its command line, its whole process environment, and the files it reads."""

    argv: list[str]
    environment: dict[str, str]
    files: list[FileToWrite] = Field(default_factory=list)

    def write_files(self) -> None:
        for file in self.files:
            file.write()


class ServeRequest(BaseModel):
    """What a run's environment process is served with. ``config`` holds the rest: ``infra.api_url`` (the
    trajectory API), ``infra.inference_url``, ``infra.tokenizer_name``, the sizes in ``env``, ``wandb``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    config: RunConfig
    paths: RunPaths
    base_environment: dict[str, str]  # the supervisor's environment for a child, the run's secrets included
    secret: str | None = Field(default=None, repr=False)  # the run's servers' secret
    api_secret: str | None = Field(default=None, repr=False)  # the trajectory API's: none for an external API

    def host_argv(self, python: str, spec: str) -> list[str]:
        """``python -m hermes_nb.env_host serve SPEC`` with the run's config: the usual serve command."""
        return [python, "-m", HOST_MODULE, "serve", spec, "--config", str(self.paths.config)]


class ModelTestRequest(BaseModel):
    """One model's test by ``rl_test_inference``: write ``num_groups`` scored groups of ``group_size`` to
    ``output`` (rows as ``python -m hermes_nb.env_host process`` writes them), sampling from ``model_url``."""

    config: RunConfig  # the run's, with the test's group size
    config_path: Path  # that config, saved
    python: str  # the interpreter that runs it, as ``FrameworkAdapter.python`` checked it
    base_environment: dict[str, str]
    num_groups: int
    group_size: int
    model_url: str
    model_name: str | None
    local: bool  # a local model's server (token ids and logprobs), else an endpoint (text)
    output: Path
    stem: Path  # a prefix for any other file the framework's test writes (its settings, its own groups file)

    def host_argv(self, spec: str) -> list[str]:
        """``python -m hermes_nb.env_host process SPEC`` writing this test's groups: the usual test command."""
        argv = [self.python, "-m", HOST_MODULE, "process", spec, "--num-groups", str(self.num_groups)]
        argv += ["--output", str(self.output), "--inference-url", self.model_url, "--config", str(self.config_path)]
        if self.model_name:
            argv += ["--model-name", self.model_name]  # for its log: the gateway decides what the endpoint is sent
        return argv


class FrameworkAdapter(ABC):
    """One environment framework. Subclass it, and register an instance (``hermes_nb.frameworks.registry``)."""

    name: ClassVar[str]
    recognition: ClassVar[Recognition]
    schema_module: ClassVar[str] = SCHEMA_CHILD_MODULE
    # Framework metric name -> the run's, applied by the framework's environment process; empty: the run's names.
    metric_names: ClassVar[Mapping[str, str]] = {}

    def python(self, file: str) -> str:
        """The interpreter that reads and runs the environment in ``file``, checked; raises
        ``EnvironmentPythonError`` naming it and how to install the framework. Default: hermes-nb's own."""
        return sys.executable

    def configured_python(self) -> str | None:
        """The interpreter this framework's environments run in when it is not hermes-nb's own (recorded in the
        run's ``infra.env_python``); ``None``: hermes-nb's own."""
        return None

    def described(self, name: str) -> str:
        """The environment as a selection names it."""
        return name

    def schema_environment(self, python: str, base: Mapping[str, str]) -> dict[str, str]:
        """The schema child's process environment: ``hermes_nb`` importable, output unbuffered."""
        env = dict(base)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(home.PROJECT_ROOT), env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def selection_values(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``config_init()``'s values as the run's starting ``env`` section."""
        return dict(values)

    def check_startable(self, config: RunConfig) -> None:
        """Raise ``ConfigError`` naming the field when ``config`` cannot make a run of this framework."""
        return None  # nothing to check: a framework that has something overrides this

    def check_source(self, config: RunConfig) -> None:
        """Raise ``ConfigError`` saying why and what works instead when the selected environment's source needs
        what this machine lacks; asked before a run starts its environment and before a model test."""
        return None  # every source of the framework runs here: a framework whose sources may not overrides this

    @abstractmethod
    def serve(self, request: ServeRequest) -> ChildCommand:
        """The run's environment process."""

    @abstractmethod
    def model_test(self, request: ModelTestRequest) -> ChildCommand:
        """The child that tests the environment against one model."""
