"""hermes-nb's own environments: read and run by hermes-nb's interpreter, served by its environment runtime.

A run serves one with ``python -m hermes_nb.env_host serve FILE:CLASS --config <run>/config.yaml`` (every URL,
size and the tokenizer are in the run's config; the secrets come in the process environment), and
``rl_test_inference`` with ``python -m hermes_nb.env_host process``. Its metrics are the run's names already.
"""

from __future__ import annotations

import sys
from typing import ClassVar

from hermes_nb.config import DEFAULT_FRAMEWORK
from hermes_nb.frameworks.contract import (
    ChildCommand,
    FrameworkAdapter,
    ModelTestRequest,
    Recognition,
    ServeRequest,
)


class NativeFramework(FrameworkAdapter):
    name: ClassVar[str] = DEFAULT_FRAMEWORK
    # A bare or foreign ``BaseEnv`` (a star import, ``from .base import BaseEnv``) is taken for hermes-nb's, as
    # an environment folder of helpers would write it.
    recognition: ClassVar[Recognition] = Recognition(
        base_classes=frozenset({"BaseEnv", "QAEnv", "AgentEnv"}), packages=("hermes_nb",), claims_unqualified=True
    )

    def serve(self, request: ServeRequest) -> ChildCommand:
        ref = request.config.environment
        assert ref is not None  # the launcher refuses to start without one
        spec = f"{ref.file}:{ref.class_name}"
        return ChildCommand(argv=request.host_argv(sys.executable, spec), environment=dict(request.base_environment))

    def model_test(self, request: ModelTestRequest) -> ChildCommand:
        ref = request.config.environment
        assert ref is not None  # rl_test_inference refuses to start without one
        spec = f"{ref.file}:{ref.class_name}"
        return ChildCommand(argv=request.host_argv(spec), environment=dict(request.base_environment))
