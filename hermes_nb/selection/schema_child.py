"""Child process: import one environment file and print its config schema as JSON.

Run as ``python -m hermes_nb.selection.schema_child FILE CLASS``. It is the only place where environment code is
imported for reading a config, so that an environment that raises, hangs or crashes on import cannot harm the caller
(see ``hermes_nb.selection.schema``). The answer is the last stdout line that starts with ``MARKER``; anything the
environment prints itself goes to stderr.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import json
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

MARKER = "HERMES_NB_SCHEMA "
# A server's key as atroposlib's APIServerConfig holds it: never part of the answer, which is saved in the session.
SECRET_SERVER_FIELDS = ("api_key",)
# The class attribute that declares the trainer settings an environment needs (hermes_nb.config.EnvironmentNeeds).
NEEDS_ATTRIBUTE = "trainer_needs"


def _load_class(file: str, class_name: str) -> type:
    path = Path(file).resolve()
    # Environments may import sibling helper modules, as when run as a script from their folder.
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"hermes_nb_env_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise LookupError(f"{path} defines no class {class_name}")
    return cls


def _dump(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, list | tuple):
        return [_dump(o) for o in obj]
    return json.loads(json.dumps(obj, default=str))


def _json_schema(config_cls: Any) -> dict[str, Any]:
    try:
        schema: dict[str, Any] = config_cls.model_json_schema()
        return schema
    except Exception:  # a field type without a JSON schema: fall back to names and defaults
        props = {}
        for name, info in config_cls.model_fields.items():
            prop: dict[str, Any] = {"title": name, "description": info.description or ""}
            if not info.is_required():
                prop["default"] = _dump(info.default)
            props[name] = prop
        return {"title": config_cls.__name__, "type": "object", "properties": props}


def read(file: str, class_name: str) -> dict[str, Any]:
    env_cls = _load_class(file, class_name)
    env_config, server_configs = env_cls.config_init()  # type: ignore[attr-defined]
    config_cls = type(env_config)
    needs = getattr(env_cls, NEEDS_ATTRIBUTE, None)  # hermes-nb's BaseEnv has it; other frameworks' need not
    return {
        "needs": _dump(needs) if needs is not None else {},
        "config_class": config_cls.__name__,
        "json_schema": _json_schema(config_cls),
        "values": _dump(env_config),
        "server_configs": [_without_secrets(c) for c in _dump(server_configs)]
        if isinstance(server_configs, list | tuple)
        else [],
    }


def _without_secrets(server: Any) -> Any:
    if not isinstance(server, dict):
        return server
    return {k: v for k, v in server.items() if k not in SECRET_SERVER_FIELDS}


def _print_user_traceback(exc: BaseException) -> None:
    """The traceback without this module's and importlib's frames: the caller shows its last lines."""
    tb = traceback.TracebackException.from_exception(exc)
    tb.stack = traceback.StackSummary.from_list(
        [f for f in tb.stack if f.filename != __file__ and not f.filename.startswith("<frozen")]
    )
    sys.stderr.write("".join(tb.format()))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m hermes_nb.selection.schema_child FILE CLASS", file=sys.stderr)
        return 2
    if hasattr(faulthandler, "register"):  # POSIX
        # The parent's timeout ends us with SIGTERM: say where every thread is first (on stderr), so that the
        # error names the line of the import or config_init() that hung.
        faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # the environment's own prints must not be mistaken for the answer
    try:
        answer = read(argv[0], argv[1])
    except Exception as exc:
        _print_user_traceback(exc)
        return 1
    real_stdout.write(MARKER + json.dumps(answer) + "\n")
    real_stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
