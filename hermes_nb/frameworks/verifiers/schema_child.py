"""Child process: print the config schema of a verifiers environment, as ``hermes_nb.selection.schema_child`` does.

Run as ``python -m hermes_nb.frameworks.verifiers.schema_child FILE CLASS`` in the verifiers Python. The schema is
``VerifiersSettings``' with the taskset's own config fields added as ``taskset.<field>``: verifiers resolves the
taskset's config class by its id (the file's module), the fields every taskset has (``id``, ``task``,
``system_prompt``) left out.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from hermes_nb.config import EMBEDDED_CHAT_MODEL, EnvironmentNeeds
from hermes_nb.frameworks.verifiers.handoff import HELD_OUT_SPLIT, SPLIT_FIELD, TASKSET_PREFIX, taskset_id
from hermes_nb.frameworks.verifiers.settings import VerifiersSettings

# hermes_nb.selection.schema_child's marker of the answer line (a floor above this one; a test pins them equal).
MARKER = "HERMES_NB_SCHEMA "


def taskset_schema(file: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The taskset's own config fields of the environment in ``file``: their JSON schemas and default values."""
    ident, folder = taskset_id(file)
    sys.path.insert(0, str(folder))
    import verifiers.v1 as vf

    config_cls = taskset_config_class(ident)
    schema = config_cls.model_json_schema()
    values = config_cls(id=ident).model_dump(mode="json")
    own = [name for name in config_cls.model_fields if name not in vf.TasksetConfig.model_fields]
    props = {f"{TASKSET_PREFIX}{name}": schema["properties"][name] for name in own}
    return props, {f"{TASKSET_PREFIX}{name}": values[name] for name in own}


def taskset_config_class(ident: str) -> Any:
    """The config class of the taskset ``ident``, as verifiers resolves it by the id (the taskset importable)."""
    import verifiers.v1 as vf

    return type(vf.resolve_env_config({"taskset": {"id": ident}}).taskset)


def has_held_out_split(ident: str) -> bool:
    """Whether the taskset ``ident``'s config has a ``split`` field that accepts the held-out split."""
    schema = taskset_config_class(ident).model_json_schema()
    field = schema.get("properties", {}).get(SPLIT_FIELD, {})
    return HELD_OUT_SPLIT in field.get("enum", []) or field.get("const") == HELD_OUT_SPLIT


def read(file: str) -> dict[str, object]:
    props, values = taskset_schema(file)
    schema = VerifiersSettings.model_json_schema()
    schema["properties"] = {**schema["properties"], **props}
    # The train client renders chats with the model's template: the shipped chat model has one.
    needs = EnvironmentNeeds(base_model=EMBEDDED_CHAT_MODEL)
    return {
        "needs": needs.model_dump(mode="json"),
        "config_class": VerifiersSettings.__name__,
        "json_schema": schema,
        "values": {**VerifiersSettings().model_dump(mode="json"), **values},
        "server_configs": [],
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m hermes_nb.frameworks.verifiers.schema_child FILE CLASS", file=sys.stderr)
        return 2
    answer = read(argv[0])
    sys.stdout.write(MARKER + json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
