"""Child process: print the config schema of an OpenEnv environment, as ``hermes_nb.selection.schema_child`` does.

Run as ``python -m hermes_nb.frameworks.openenv.schema_child FILE CLASS``. The config is the episode settings
(``OpenEnvSettings``), the same for every OpenEnv environment: the file is not imported (its import pulls gradio,
seconds on a loaded machine), only checked to exist.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hermes_nb.config import EMBEDDED_CHAT_MODEL, EnvironmentNeeds
from hermes_nb.frameworks.openenv.settings import OpenEnvSettings

# hermes_nb.selection.schema_child's marker of the answer line (a floor above this one; a test pins them equal).
MARKER = "HERMES_NB_SCHEMA "


def read(file: str) -> dict[str, object]:
    if not Path(file).is_file():
        raise FileNotFoundError(f"{file} is not a file")
    settings = OpenEnvSettings()
    # Episodes render MCP tools through the chat template: the shipped chat model's renders them.
    needs = EnvironmentNeeds(base_model=EMBEDDED_CHAT_MODEL, uses_tools=True)
    return {
        "needs": needs.model_dump(mode="json"),
        "config_class": OpenEnvSettings.__name__,
        "json_schema": OpenEnvSettings.model_json_schema(),
        "values": settings.model_dump(mode="json"),
        "server_configs": [],
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m hermes_nb.frameworks.openenv.schema_child FILE CLASS", file=sys.stderr)
        return 2
    try:
        answer = read(argv[0])
    except OSError as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(MARKER + json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
