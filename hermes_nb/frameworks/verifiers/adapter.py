"""verifiers' environments: a module exporting a ``vf.Taskset`` subclass, run unmodified in the verifiers Python.

Discovery claims a class whose root is ``Taskset`` from the ``verifiers`` package (nothing imported; the file's
module is the taskset id). Its config is ``settings.VerifiersSettings`` plus the taskset's own config fields,
read by ``schema_child`` in the verifiers Python. A run's environment process is ``python -m
hermes_nb.env_runtime serve`` of ``episode_env.VerifiersEnv`` in the verifiers Python: verifiers plays the
episodes (``subprocess`` runtime, the settings' chat harness), sampling through its train client from the run's
inference server; ``rl_test_inference`` runs the same class with ``process`` (an endpoint through verifiers' eval
client).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from hermes_nb.config import RunConfig
from hermes_nb.frameworks.contract import ChildCommand, FrameworkAdapter, ModelTestRequest, Recognition, ServeRequest
from hermes_nb.frameworks.verifiers import chat_program, handoff, interpreter
from hermes_nb.frameworks.verifiers.settings import VerifiersSettings
from hermes_nb.system.side_python import env_python_environment

EPISODE_ENV_SPEC = handoff.EPISODE_ENV_SPEC
DEFAULT_HARNESS = VerifiersSettings.model_fields["harness"].default


class VerifiersFramework(FrameworkAdapter):
    name: ClassVar[str] = "verifiers"
    recognition: ClassVar[Recognition] = Recognition(
        base_classes=frozenset({"Taskset"}), packages=("verifiers",), mark="[verifiers] "
    )
    schema_module: ClassVar[str] = "hermes_nb.frameworks.verifiers.schema_child"

    def python(self, file: str) -> str:
        return interpreter.verifiers_python(file)

    def check_startable(self, config: RunConfig) -> None:
        """A run whose episodes are verifiers' ``null`` programs needs ``uv`` in the verifiers Python's reach."""
        assert config.environment is not None  # the launcher checks a run's environment first
        harness = config.env.get("harness", DEFAULT_HARNESS)
        if config.trainer.start_environment and harness == chat_program.HARNESS_ID:
            interpreter.verifiers_python(config.environment.file, needs_uv=True)

    def configured_python(self) -> str | None:
        return interpreter.configured_python()

    def described(self, name: str) -> str:
        return f"{name} (verifiers; run by {interpreter.configured_python()})"

    def schema_environment(self, python: str, base: Mapping[str, str]) -> dict[str, str]:
        return env_python_environment(base)

    def _environment(
        self, base: Mapping[str, str], python: str, file: str, client: handoff.ClientKind
    ) -> dict[str, str]:
        env = env_python_environment(base)
        env["PATH"] = interpreter.process_path(python, env.get("PATH", ""))
        env[handoff.FILE_VAR] = file
        env[handoff.CLIENT_VAR] = client
        return env

    def serve(self, request: ServeRequest) -> ChildCommand:
        ref = request.config.environment
        assert ref is not None  # the launcher refuses to start without one
        python = interpreter.verifiers_python(ref.file)
        argv = request.runtime_argv(python, EPISODE_ENV_SPEC)
        environment = self._environment(request.base_environment, python, ref.file, "train")
        return ChildCommand(argv=argv, environment=environment)

    def model_test(self, request: ModelTestRequest) -> ChildCommand:
        ref = request.config.environment
        assert ref is not None  # rl_test_inference refuses to start without one
        argv = request.runtime_argv(EPISODE_ENV_SPEC)
        client: handoff.ClientKind = "train" if request.local else "eval"
        environment = self._environment(request.base_environment, request.python, ref.file, client)
        return ChildCommand(argv=argv, environment=environment)
