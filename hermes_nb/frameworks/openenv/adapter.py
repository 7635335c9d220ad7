"""OpenEnv's environments: an ``Environment`` subclass and its ``app``, served unmodified in the OpenEnv Python.

Discovery claims a class whose root is ``Environment`` or ``MCPEnvironment`` from the ``openenv`` package (nothing
imported). Its config is the episode settings (``settings.OpenEnvSettings``, read by ``schema_child`` without
importing the file). A run's environment process is ``python -m hermes_nb.env_runtime serve`` of
``episode_env.OpenEnvAgentEnv`` in the OpenEnv Python, which starts the file's server (or uses ``server_url``) and
plays the episodes; ``rl_test_inference`` runs the same class with ``process``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from hermes_nb.frameworks.contract import ChildCommand, FrameworkAdapter, ModelTestRequest, Recognition, ServeRequest
from hermes_nb.frameworks.openenv import handoff, interpreter
from hermes_nb.system.side_python import env_python_environment

EPISODE_ENV_SPEC = handoff.EPISODE_ENV_SPEC
SERVER_LOG_PROCESS = "openenv_server"


class OpenEnvFramework(FrameworkAdapter):
    name: ClassVar[str] = "openenv"
    recognition: ClassVar[Recognition] = Recognition(
        base_classes=frozenset({"Environment", "MCPEnvironment"}), packages=("openenv",), mark="[openenv] "
    )
    schema_module: ClassVar[str] = "hermes_nb.frameworks.openenv.schema_child"

    def python(self, file: str) -> str:
        return interpreter.openenv_python(file)

    def configured_python(self) -> str | None:
        return interpreter.configured_python()

    def described(self, name: str) -> str:
        return f"{name} (OpenEnv; served and run by {interpreter.configured_python()})"

    def schema_environment(self, python: str, base: Mapping[str, str]) -> dict[str, str]:
        return env_python_environment(base)

    def _environment(self, base: Mapping[str, str], file: str, log: Path) -> dict[str, str]:
        env = env_python_environment(base)
        env[handoff.FILE_VAR] = file
        env[handoff.LOG_VAR] = str(log)
        return env

    def serve(self, request: ServeRequest) -> ChildCommand:
        ref = request.config.environment
        assert ref is not None  # the launcher refuses to start without one
        python = interpreter.openenv_python(ref.file)
        argv = request.runtime_argv(python, EPISODE_ENV_SPEC)
        log = request.paths.run_dir / f"{SERVER_LOG_PROCESS}.log"
        return ChildCommand(argv=argv, environment=self._environment(request.base_environment, ref.file, log))

    def model_test(self, request: ModelTestRequest) -> ChildCommand:
        ref = request.config.environment
        assert ref is not None  # rl_test_inference refuses to start without one
        argv = request.runtime_argv(EPISODE_ENV_SPEC)
        log = Path(f"{request.stem}.{SERVER_LOG_PROCESS}.log")
        return ChildCommand(argv=argv, environment=self._environment(request.base_environment, ref.file, log))
