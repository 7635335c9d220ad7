"""The base of a framework whose environments run in a Python of their own (a ``SidePython``): OpenEnv's,
verifiers', and the next one.

Such a framework's environment process is hermes-nb's own host (``python -m hermes_nb.env_host``) serving
one episode class of the framework's folder in the side Python, told which environment file to run by one
variable. A subclass names its interpreter, that class and that variable; what else its processes need (a log
file, a client, a PATH) it adds in ``serve_variables`` and ``model_test_variables``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from hermes_nb.frameworks.contract import ChildCommand, FrameworkAdapter, ModelTestRequest, ServeRequest
from hermes_nb.system.side_python import SidePython, env_python_environment


class SidePythonFramework(FrameworkAdapter):
    """A framework run in its ``side_python``: checked before use, reached with ``hermes_nb`` importable."""

    side_python: ClassVar[SidePython]
    # The episode class the runtime serves, as ``FILE:CLASS``; the variable that names the environment's file.
    episode_env_spec: ClassVar[str]
    file_variable: ClassVar[str]
    # How a selection says the side Python uses the environment: "(OpenEnv; served and run by PYTHON)".
    uses: ClassVar[str] = "run"

    def python(self, file: str) -> str:
        return self.side_python.checked(file)

    def configured_python(self) -> str | None:
        return self.side_python.configured()

    def described(self, name: str) -> str:
        return f"{name} ({self.side_python.framework}; {self.uses} by {self.side_python.configured()})"

    def schema_environment(self, python: str, base: Mapping[str, str]) -> dict[str, str]:
        return env_python_environment(base)

    def serve_variables(self, request: ServeRequest, python: str, env: Mapping[str, str]) -> dict[str, str]:
        """What a run's environment process needs beyond ``hermes_nb`` and the file (``env`` holds the rest)."""
        return {}

    def model_test_variables(self, request: ModelTestRequest, env: Mapping[str, str]) -> dict[str, str]:
        """What a model test's child needs beyond ``hermes_nb`` and the file (``env`` holds the rest)."""
        return {}

    def _environment(self, base: Mapping[str, str], file: str) -> dict[str, str]:
        env = env_python_environment(base)
        env[self.file_variable] = file
        return env

    def serve(self, request: ServeRequest) -> ChildCommand:
        ref = request.config.environment
        assert ref is not None  # the launcher refuses to start without one
        python = self.python(ref.file)
        env = self._environment(request.base_environment, ref.file)
        env.update(self.serve_variables(request, python, env))
        return ChildCommand(argv=request.host_argv(python, self.episode_env_spec), environment=env)

    def model_test(self, request: ModelTestRequest) -> ChildCommand:
        ref = request.config.environment
        assert ref is not None  # rl_test_inference refuses to start without one
        env = self._environment(request.base_environment, ref.file)
        env.update(self.model_test_variables(request, env))
        return ChildCommand(argv=request.host_argv(self.episode_env_spec), environment=env)
