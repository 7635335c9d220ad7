"""Serve an atroposlib environment, as it is, in a hermes-nb run. Runs in the environment Python.

    python -m hermes_nb.frameworks.atroposlib.bridge FILE CLASS --metrics PATH --api-url URL --total-steps N
        -- serve --config YAML

FILE is imported as ``python FILE`` imports it (its folder first on the path), and everything after ``--`` goes to
the class's own ``cli()``: atroposlib's ``serve`` command parses it, merges ``config_init()`` < YAML, builds the
environment and runs its ``env_manager()`` loop. The environment's code is not touched; what a hermes-nb run
needs is added around atroposlib's ``BaseEnv`` methods, which every environment inherits or calls through
``super()``:

- ``wandb_log`` and ``evaluate_log``: the dicts they log (atroposlib logs only to W&B) become rows of the run's
  ``env_metrics.jsonl`` under the run's metric names (``metrics_map``). Wrapping the method is the one place that
  sees every metric, W&B on or off; reading W&B's files instead would need W&B on in every run and a parser for
  its binary format.
- ``handle_send_to_api`` / ``_send_scored_data_to_api``: the groups scored and posted, for the reward and
  correctness of every sampled completion and the counts of groups posted and skipped.
- ``env_manager``: atroposlib's loop returns once the trainer's step plus the queued batches pass its
  ``total_steps``. Then the bridge checks the run can still finish (else exit ``EARLY_EXIT``, named in the
  log), waits for the trainer's last step, evaluates the final weights once (``env_step_checks`` tells whether
  atroposlib's loop already started that evaluation), logs, and disconnects, which tells the trainer the final
  evaluation is done, as a native environment does.

SIGTERM (the supervisor's stop) ends the process with status 0, as it ends a native environment.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import inspect
import json
import logging
import signal
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from hermes_nb.frameworks.atroposlib.metrics_map import EnvMetricsSink
from hermes_nb.protocol.auth import api_secret_from_env, bearer_headers, secret_from_env
from hermes_nb.protocol.redaction import without_secrets

logger = logging.getLogger("hermes_nb.frameworks.atroposlib.bridge")

# The environment's loop ended before the run's last step can be trained: the supervisor reports this status
# with the log's last lines, where the reason is.
EARLY_EXIT = 3
USAGE_ERROR = 2
# How often the trainer's step is read while waiting for its last one; a local /status answers in milliseconds.
STEP_POLL_S = 0.2
HTTP_TIMEOUT_S = 10.0
WRAPPED = (
    "wandb_log",
    "evaluate_log",
    "handle_send_to_api",
    "_send_scored_data_to_api",
    "env_step_checks",
    "env_manager",
)
# Set on the environment: the trainer step at which atroposlib's loop last started an evaluation.
EVALUATED_AT = "_hermes_nb_evaluated_at"


class EarlyExit(Exception):
    """The environment stopped feeding the run before its last step."""


@dataclass(frozen=True)
class RunLink:
    api_url: str
    total_steps: int
    sink: EnvMetricsSink


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """The bridge's own arguments, and atroposlib's (everything after ``--``)."""
    args = list(argv)
    split = args.index("--") if "--" in args else len(args)
    parser = argparse.ArgumentParser(
        prog="python -m hermes_nb.frameworks.atroposlib.bridge", description=__doc__.splitlines()[0]
    )
    parser.add_argument("file", help="the environment's file")
    parser.add_argument("class_name", help="its atroposlib BaseEnv subclass")
    parser.add_argument("--metrics", required=True, help="the run's env_metrics.jsonl")
    parser.add_argument("--api-url", required=True, help="the run's trajectory API")
    parser.add_argument("--total-steps", type=int, required=True, help="the run's total trainer steps")
    return parser.parse_args(args[:split]), args[split + 1 :]


def load_class(file: str, class_name: str) -> type:
    """``class_name`` from ``file``, imported as ``python FILE`` would import it (not as ``__main__``)."""
    from atroposlib.envs.base import BaseEnv

    path = Path(file).resolve()
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"hermes_nb_atropos_env_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic looks the module up while the config classes are made
    spec.loader.exec_module(module)
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, BaseEnv)):
        raise ValueError(f"{path}: no atroposlib BaseEnv subclass named {class_name}")
    return cls


def install(base: type, run: RunLink) -> None:
    """Wrap ``base``'s (atroposlib's ``BaseEnv``) methods so that the run sees what the environment does."""
    original = {name: getattr(base, name) for name in WRAPPED}

    async def wandb_log(self: Any, wandb_metrics: dict[str, Any] | None = None) -> None:
        logged: dict[str, Any] = {} if wandb_metrics is None else wandb_metrics
        await original["wandb_log"](self, logged)  # adds atroposlib's own metrics to the same dict
        run.sink.log(self.curr_step, logged)

    async def evaluate_log(self: Any, metrics: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        bound = inspect.signature(original["evaluate_log"]).bind(self, metrics, *args, **kwargs).arguments
        start, end = bound.get("start_time"), bound.get("end_time")
        seconds = end - start if isinstance(start, int | float) and isinstance(end, int | float) else None
        run.sink.log_evaluation(self.curr_step, metrics, seconds)
        return await original["evaluate_log"](self, metrics, *args, **kwargs)

    async def handle_send_to_api(self: Any, scored_data: Any, *args: Any, **kwargs: Any) -> Any:
        run.sink.observe_groups(scored_data if isinstance(scored_data, list) else [scored_data])
        return await original["handle_send_to_api"](self, scored_data, *args, **kwargs)

    async def send_scored_data(self: Any, scored_data: Any) -> Any:
        answer = await original["_send_scored_data_to_api"](self, scored_data)
        run.sink.observe_posted(len(scored_data) if isinstance(scored_data, list) else 1)
        return answer

    async def env_step_checks(self: Any) -> None:
        runner = self.eval_runner
        await original["env_step_checks"](self)  # may start an evaluation, then moves curr_step to the new step
        if self.eval_runner is not runner:
            setattr(self, EVALUATED_AT, self.curr_step)

    async def env_manager(self: Any) -> None:
        await original["env_manager"](self)
        await finish(self, run)

    for name, method in (
        ("wandb_log", wandb_log),
        ("evaluate_log", evaluate_log),
        ("handle_send_to_api", handle_send_to_api),
        ("_send_scored_data_to_api", send_scored_data),
        ("env_step_checks", env_step_checks),
        ("env_manager", env_manager),
    ):
        setattr(base, name, method)


async def finish(env: Any, run: RunLink) -> None:
    """After atroposlib's loop: the run can finish, the trainer's last step, a final evaluation, disconnect."""
    status = await asyncio.to_thread(api_get, run.api_url, "/status")
    check_not_early(env, run, status)
    step = await wait_for_step(run)
    env.curr_step = step  # as atroposlib's env_step_checks would: the final rows are the final step's
    await final_evaluation(env, step)
    await env.wandb_log({})  # what evaluate() keeps for the next log (atroposlib's environments do) is written
    logger.info("hermes-nb: disconnecting from the trajectory API")
    await asyncio.to_thread(api_post, run.api_url, "/disconnect-env", {"env_id": env.env_id})


async def final_evaluation(env: Any, step: int) -> None:
    """Evaluate the final weights once: atroposlib's loop may have started that evaluation itself at this step
    (then it is awaited, not repeated), or ended before the step came."""
    runner = env.eval_runner
    if runner is not None and not runner.done():
        await asyncio.wait([runner])
    if getattr(env, EVALUATED_AT, None) == step:
        logger.info("hermes-nb: the final weights (step %d) were evaluated by the environment's loop", step)
        return
    logger.info("hermes-nb: the trainer reached its last step (%d); evaluating the final weights", step)
    started = time.monotonic()
    await env.evaluate()
    logger.info("hermes-nb: final evaluation done in %.1f s", time.monotonic() - started)


def check_not_early(env: Any, run: RunLink, status: dict[str, Any]) -> None:
    """Raise ``EarlyExit`` when the batches trained and queued cannot reach the run's last step."""
    step, queued_groups = int(status["current_step"]), int(status["queue_size"])
    batches = queued_groups * int(env.config.group_size) // max(1, int(env.config.batch_size))
    env_total = int(env.config.total_steps)
    if env_total >= run.total_steps and step + batches >= run.total_steps:
        return
    name = type(env).__name__
    why = (
        f"its total_steps is {env_total} (atroposlib's loop ends once the trainer's step and the queued batches "
        "pass it); leave total_steps to the run, which sets it from env.total_steps"
        if env_total < run.total_steps
        else f"its env_manager loop returned with {batches} batch(es) queued"
    )
    raise EarlyExit(f"{name} stopped feeding the run at trainer step {step} of {run.total_steps}: {why}")


async def wait_for_step(run: RunLink) -> int:
    """Wait until the trainer has taken its last step (the API's step reaches the run's total); that step.
    Each request runs in a thread, the wait between them on the loop, so a stop ends the wait at once."""
    while True:
        step = int((await asyncio.to_thread(api_get, run.api_url, "/status"))["current_step"])
        if step >= run.total_steps:
            return step
        await asyncio.sleep(STEP_POLL_S)


def api_get(api_url: str, path: str) -> dict[str, Any]:
    # The run's secret when the API is the run's own (the supervisor sets it; an external API never gets it).
    request = urllib.request.Request(api_url.rstrip("/") + path, headers=bearer_headers(api_secret_from_env()))
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def api_post(api_url: str, path: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        api_url.rstrip("/") + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **bearer_headers(api_secret_from_env())},
    )
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S):
        pass


def one_server_per_declared(cls: type, cli_args: list[str]) -> None:
    """When ``config_init()`` declares several servers, atroposlib ignores a single ``openai:`` mapping and would
    sample from those servers; a list of as many entries, each pointed at the run's server, replaces them."""
    import yaml

    declared = cls.config_init()[1]  # type: ignore[attr-defined]
    if not (isinstance(declared, list) and len(declared) >= 2) or "--config" not in cli_args:
        return
    settings_path = Path(cli_args[cli_args.index("--config") + 1])
    settings = yaml.safe_load(settings_path.read_text(encoding="utf-8"))
    ours = settings.get("openai") or {}
    settings["openai"] = [{**server.model_dump(mode="json"), **ours} for server in declared]
    settings_path.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")


def hide_secret_from_wandb() -> None:
    """atroposlib gives ``wandb.init`` its whole config, whose ``rollout_server_url`` is the run's capability URL
    (``hermes_nb.protocol.auth``): W&B gets the config with the secret replaced, so no W&B file or upload holds
    it. atroposlib imports wandb itself, so this costs no import."""
    secret = secret_from_env()
    if not secret:
        return
    import wandb

    original = wandb.init

    def init(*args: Any, **kwargs: Any) -> Any:
        if "config" in kwargs:
            kwargs["config"] = without_secrets(kwargs["config"], [secret])
        return original(*args, **kwargs)

    wandb.init = init


def _stop(signum: int, frame: FrameType | None) -> None:
    logger.info("hermes-nb: stop requested; exiting")
    raise SystemExit(0)


def _log_to_stderr() -> None:
    # The bridge's lines only: configuring the root logger would also turn on atroposlib's INFO lines, one per
    # status poll (10 a second), which atroposlib's own CLI leaves unprinted.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s bridge %(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def class_to_run(args: argparse.Namespace, log: logging.Logger) -> type | None:
    """The environment's class (``args.file``, ``args.class_name``), with SIGTERM set to end the process as a stop
    ends a native environment; None, logged, when the file has no such class."""
    signal.signal(signal.SIGTERM, _stop)
    try:
        return load_class(args.file, args.class_name)
    except ValueError as exc:
        log.error("hermes-nb: %s", exc)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    _log_to_stderr()
    args, cli_args = parse_args(sys.argv[1:] if argv is None else argv)
    cls = class_to_run(args, logger)
    if cls is None:
        return USAGE_ERROR
    from atroposlib.envs.base import BaseEnv

    install(BaseEnv, RunLink(args.api_url, args.total_steps, EnvMetricsSink(Path(args.metrics))))
    hide_secret_from_wandb()
    one_server_per_declared(cls, cli_args)
    logger.info(
        "hermes-nb: serving %s with atroposlib's CLI: python %s %s", cls.__name__, args.file, " ".join(cli_args)
    )
    sys.argv = [args.file, *cli_args]  # atroposlib's CLI reads its flags from sys.argv
    try:
        cls.cli()  # type: ignore[attr-defined]  # exits through sys.exit with atroposlib's status
    except EarlyExit as exc:
        logger.error("hermes-nb: %s", exc)
        return EARLY_EXIT
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
