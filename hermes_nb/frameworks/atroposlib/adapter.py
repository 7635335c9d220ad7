"""atroposlib's environments: read and run by the environment Python, served by atroposlib's own CLI.

Discovery claims a class whose root ``BaseEnv`` comes from the ``atroposlib`` package. The interpreter is the
environment Python (``interpreter``), checked to import atroposlib before selection reads a config or a run starts.
A run serves the environment with atroposlib's ``serve`` through the bridge (``serve``, ``bridge``),
``rl_test_inference`` tests it with atroposlib's ``process`` (``model_testing``, ``model_testing_bridge``), and the
bridge writes its ``wandb_log`` metrics under the run's names (``metrics_map``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from hermes_nb.config import RunConfig
from hermes_nb.frameworks.atroposlib import interpreter, metrics_map, model_testing, serve, sizes
from hermes_nb.frameworks.contract import (
    ChildCommand,
    FileToWrite,
    FrameworkAdapter,
    ModelTestRequest,
    Recognition,
    ServeRequest,
)
from hermes_nb.system.side_python import env_python_environment


class AtroposlibFramework(FrameworkAdapter):
    name: ClassVar[str] = "atroposlib"
    recognition: ClassVar[Recognition] = Recognition(
        base_classes=frozenset({"BaseEnv"}), packages=("atroposlib",), mark="[atroposlib] "
    )
    metric_names: ClassVar[Mapping[str, str]] = metrics_map.RENAMED_KEYS

    def python(self, file: str) -> str:
        return interpreter.env_python(file)

    def configured_python(self) -> str | None:
        return interpreter.configured_python()

    def described(self, name: str) -> str:
        return f"{name} (atroposlib; read and run by {interpreter.configured_python()})"

    def schema_environment(self, python: str, base: Mapping[str, str]) -> dict[str, str]:
        # Another interpreter sees the hermes_nb package, never hermes-nb's site-packages.
        return env_python_environment(base)

    def selection_values(self, values: Mapping[str, Any]) -> dict[str, Any]:
        return sizes.selection_values(values)

    def check_startable(self, config: RunConfig) -> None:
        sizes.check_startable(config)

    def serve(self, request: ServeRequest) -> ChildCommand:
        config = request.config
        # The settings hold the secret too: atroposlib takes only URLs and keys.
        settings = FileToWrite(
            path=serve.settings_path(request.paths),
            text=serve.settings_text(config, request.secret, request.api_secret),
        )
        return ChildCommand(
            argv=serve.serve_argv(config, request.paths),
            environment=serve.serve_environment(config, request.base_environment),
            files=[settings],
        )

    def model_test(self, request: ModelTestRequest) -> ChildCommand:
        config = request.config
        settings = model_testing.process_settings(
            config,
            num_groups=request.num_groups,
            group_size=request.group_size,
            model_url=request.model_url,
            model_name=request.model_name,
            local=request.local,
            # atroposlib's own groups file, with its HTML page beside it
            groups_file=Path(f"{request.stem}.atropos.jsonl"),
        )
        settings_file = FileToWrite(path=Path(f"{request.stem}.atropos.yaml"), text=serve.yaml_text(settings))
        return ChildCommand(
            argv=model_testing.process_argv(config, request.python, settings_file.path, request.output),
            environment=model_testing.process_environment(request.base_environment),
            files=[settings_file],
        )
