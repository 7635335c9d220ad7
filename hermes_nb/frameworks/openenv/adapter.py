"""OpenEnv's environments: an ``Environment`` subclass and its ``app``, served unmodified in the OpenEnv Python.

Discovery claims a class whose root is ``Environment`` or ``MCPEnvironment`` from the ``openenv`` package (nothing
imported). Its config is the episode settings (``settings.OpenEnvSettings``, read by ``schema_child`` without
importing the file). A run's environment process is ``python -m hermes_nb.env_host serve`` of
``episode_env.OpenEnvAgentEnv`` in the OpenEnv Python, which starts the file's server (or uses ``server_url``) and
plays the episodes; ``rl_test_inference`` runs the same class with ``process``. A source that needs what this
machine lacks (a Docker image, a Hugging Face Space) is refused before either starts anything (``sources``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from hermes_nb.config import RunConfig
from hermes_nb.errors import ConfigError
from hermes_nb.frameworks.contract import ModelTestRequest, Recognition, ServeRequest
from hermes_nb.frameworks.openenv import handoff, interpreter, sources
from hermes_nb.frameworks.side_framework import SidePythonFramework
from hermes_nb.system.side_python import SidePython

EPISODE_ENV_SPEC = handoff.EPISODE_ENV_SPEC
SERVER_LOG_PROCESS = "openenv_server"


class OpenEnvFramework(SidePythonFramework):
    name: ClassVar[str] = "openenv"
    recognition: ClassVar[Recognition] = Recognition(
        base_classes=frozenset({"Environment", "MCPEnvironment"}), packages=("openenv",), mark="[openenv] "
    )
    schema_module: ClassVar[str] = "hermes_nb.frameworks.openenv.schema_child"
    side_python: ClassVar[SidePython] = interpreter.OPENENV
    episode_env_spec: ClassVar[str] = EPISODE_ENV_SPEC
    file_variable: ClassVar[str] = handoff.FILE_VAR
    uses: ClassVar[str] = "served and run"

    def check_source(self, config: RunConfig) -> None:
        """A Docker-image manifest or a Hugging Face Space: refused, saying what works instead (``sources``)."""
        assert config.environment is not None  # a run and a model test check their environment first
        why = sources.refusal(config.environment.file, config.env.get("server_url"))
        if why is not None:
            raise ConfigError(f"environment {config.environment.name!r}: {why}")

    def serve_variables(self, request: ServeRequest, python: str, env: Mapping[str, str]) -> dict[str, str]:
        return {handoff.LOG_VAR: str(request.paths.run_dir / f"{SERVER_LOG_PROCESS}.log")}

    def model_test_variables(self, request: ModelTestRequest, env: Mapping[str, str]) -> dict[str, str]:
        return {handoff.LOG_VAR: str(Path(f"{request.stem}.{SERVER_LOG_PROCESS}.log"))}
