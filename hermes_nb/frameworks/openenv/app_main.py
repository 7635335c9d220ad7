"""Child process: serve an OpenEnv environment file's ``app`` on loopback, as ``uvicorn FILE:app`` would.

Run as ``python -m hermes_nb.frameworks.openenv.app_main FILE --port PORT`` in the OpenEnv Python. The file is
imported as a script from its folder (its sibling modules importable), and its module-level ``app`` (what
OpenEnv's ``create_app(...)`` returns) is served unmodified.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

APP_ATTRIBUTE = "app"


def load_app(file: str) -> Any:
    path = Path(file).resolve()
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    app = getattr(module, APP_ATTRIBUTE, None)
    if app is None:
        raise SystemExit(
            f"{path} defines no `{APP_ATTRIBUTE}`: an OpenEnv environment file ends with "
            "`app = create_app(MyEnvironment, MyAction, MyObservation)`"
        )
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hermes_nb.frameworks.openenv.app_main")
    parser.add_argument("file")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(load_app(args.file), host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
