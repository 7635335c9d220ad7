"""Command line of an environment: ``serve``, ``process`` and ``evaluate``.

``python -m hermes_nb.env_host serve path/to/env.py[:Class] --config run.yaml`` is how a run starts its
environment; ``MyEnv.cli()`` (``python my_env.py serve --config run.yaml``) hands over to the same command with its
own file and class. This module runs a class it is given; finding the class a file names
(``hermes_nb.env_host.loading``) is left to ``hermes_nb.env_host.__main__``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from collections.abc import Callable

from hermes_nb.config import RunConfig
from hermes_nb.env.base import BaseEnv
from hermes_nb.env_host.env_config import build_env_config
from hermes_nb.errors import HermesNBError

logger = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s env %(levelname)s %(name)s: %(message)s"
# Exit status of a user error (bad file, bad config), as argparse uses for bad arguments.
USAGE_ERROR = 2


PROG = "python -m hermes_nb.env_host"


def build_parser() -> argparse.ArgumentParser:
    """The subcommands, each taking the environment file first."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="feed a training run through its trajectory API")
    process = commands.add_parser("process", help="write N scored groups to a JSONL file (no API)")
    evaluate = commands.add_parser("evaluate", help="run the environment's evaluation once")
    for sub in (serve, process, evaluate):
        sub.add_argument("spec", help="path/to/env.py[:ClassName]")
    serve.add_argument("--config", required=True, help="the run's config.yaml")
    for sub in (process, evaluate):
        sub.add_argument("--config", help="a run config YAML (its env: section is used)")
        sub.add_argument("--inference-url", help="the inference server, e.g. http://127.0.0.1:9001")
        sub.add_argument("--model-name", help="model name sent to the inference server (an endpoint's model id)")
        sub.add_argument(
            "--api-key-env", help="NAME of the environment variable holding the server's key (never the key itself)"
        )
    process.add_argument("--num-groups", type=int, required=True)
    process.add_argument("--output", required=True, help="JSONL file to write")
    return parser


def run(args: argparse.Namespace, env_class: Callable[[], type[BaseEnv]]) -> int:
    """Run the parsed subcommand on the class ``env_class()`` returns: called once logging is set up, so what
    loading an environment file logs is formatted, and a user error it raises is reported like any other."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)
    # One line per completion request would bury the environment's own log lines.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        env = _make_env(args, env_class())
        return asyncio.run(_dispatch(args, env))
    except HermesNBError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        return 0


def _make_env(args: argparse.Namespace, cls: type[BaseEnv]) -> BaseEnv:
    run_config = RunConfig.load(args.config) if args.config else RunConfig()
    inference_url = getattr(args, "inference_url", None)
    if inference_url:
        infra = run_config.infra.model_copy(update={"inference_url": inference_url})
        run_config = run_config.model_copy(update={"infra": infra})
    args.run_config = run_config
    config, server_configs = build_env_config(cls, run_config)
    overrides = _server_overrides(args)
    if overrides:
        server_configs[0] = server_configs[0].model_copy(update=overrides)
    return cls(config, server_configs)


def _server_overrides(args: argparse.Namespace) -> dict[str, str]:
    """``--model-name`` / ``--api-key-env`` for the first (the run's) inference server, where given."""
    wanted = {"model_name": getattr(args, "model_name", None), "api_key_env": getattr(args, "api_key_env", None)}
    return {key: value for key, value in wanted.items() if value}


async def _dispatch(args: argparse.Namespace, env: BaseEnv) -> int:
    from hermes_nb.env_host import loop

    if args.command == "serve":
        outcome = await loop.serve(env, args.run_config)
        logger.info("environment %s at step %d (%d groups posted)", outcome.status, outcome.step,
                    outcome.groups_posted)  # fmt: skip
        return outcome.exit_code
    try:
        if args.command == "process":
            summary = await loop.process(env, args.num_groups, args.output)
            print(summary.model_dump_json(indent=1))
        else:
            print(json.dumps(await loop.evaluate_once(env), indent=1))
    finally:
        await env.teardown()
        await env.server.aclose()
    return 0
