"""verifiers' environments: a module exporting a ``vf.Taskset`` subclass, run unmodified in the verifiers Python.

Discovery claims a class whose root is ``Taskset`` from the ``verifiers`` package (nothing imported; the file's
module is the taskset id). Its config is ``settings.VerifiersSettings`` plus the taskset's own config fields,
read by ``schema_child`` in the verifiers Python. A run's environment process is ``python -m
hermes_nb.env_host serve`` of ``episode_env.VerifiersEnv`` in the verifiers Python: verifiers plays the
episodes (``subprocess`` runtime, the settings' chat harness), sampling through its train client from the run's
inference server; ``rl_test_inference`` runs the same class with ``process`` (an endpoint through verifiers' eval
client).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from hermes_nb.config import RunConfig
from hermes_nb.frameworks.contract import ModelTestRequest, Recognition, ServeRequest
from hermes_nb.frameworks.side_framework import SidePythonFramework
from hermes_nb.frameworks.verifiers import chat_program, handoff, interpreter
from hermes_nb.frameworks.verifiers.settings import VerifiersSettings
from hermes_nb.system.side_python import SidePython

EPISODE_ENV_SPEC = handoff.EPISODE_ENV_SPEC
DEFAULT_HARNESS = VerifiersSettings.model_fields["harness"].default
# What verifiers' environments exported before its Taskset API (the packages of its repository's environments/
# folder: ``def load_environment(**kwargs) -> vf.Environment``, or ``load_taskset``). verifiers 0.4.0 loads an
# environment only as the ``vf.Taskset`` subclass its package exports in ``__all__`` (``vf-eval`` refuses such a
# package too), and the classes those functions build (``vf.SingleTurnEnv``, ``vf.Rubric``) are gone from it.
LOADER_FUNCTIONS = frozenset({"load_environment", "load_taskset"})
LOADER_REFUSAL = (
    "it exports only a load_environment/load_taskset function, and verifiers 0.4.0 loads an environment only as "
    "the vf.Taskset subclass its package exports in __all__ (vf-eval refuses it too); port it to a vf.Taskset "
    "(vf-init lays one out)"
)


class VerifiersFramework(SidePythonFramework):
    name: ClassVar[str] = "verifiers"
    recognition: ClassVar[Recognition] = Recognition(
        base_classes=frozenset({"Taskset"}),
        packages=("verifiers",),
        mark="[verifiers] ",
        entry_functions=LOADER_FUNCTIONS,
        entry_refusal=LOADER_REFUSAL,
    )
    schema_module: ClassVar[str] = "hermes_nb.frameworks.verifiers.schema_child"
    side_python: ClassVar[SidePython] = interpreter.VERIFIERS
    episode_env_spec: ClassVar[str] = EPISODE_ENV_SPEC
    file_variable: ClassVar[str] = handoff.FILE_VAR

    def python(self, file: str) -> str:
        # uv only for the ``null`` harness: ``check_startable`` asks for it where a run needs it.
        return interpreter.verifiers_python(file)

    def check_startable(self, config: RunConfig) -> None:
        """A run whose episodes are verifiers' ``null`` programs needs ``uv`` in the verifiers Python's reach."""
        assert config.environment is not None  # the launcher checks a run's environment first
        harness = config.env.get("harness", DEFAULT_HARNESS)
        if config.trainer.start_environment and harness == chat_program.HARNESS_ID:
            interpreter.verifiers_python(config.environment.file, needs_uv=True)

    def serve_variables(self, request: ServeRequest, python: str, env: Mapping[str, str]) -> dict[str, str]:
        return self._process_variables(python, env, "train")

    def model_test_variables(self, request: ModelTestRequest, env: Mapping[str, str]) -> dict[str, str]:
        client: handoff.ClientKind = "train" if request.local else "eval"
        return self._process_variables(request.python, env, client)

    def _process_variables(self, python: str, env: Mapping[str, str], client: handoff.ClientKind) -> dict[str, str]:
        return {"PATH": interpreter.process_path(python, env.get("PATH", "")), handoff.CLIENT_VAR: client}
