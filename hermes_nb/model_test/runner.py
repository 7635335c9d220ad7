"""``await rl_test_inference(num_steps, group_size, models)``: does the selected environment work, and how well
does each model do on it, before a run is spent?

Per model, the environment runs in ``process`` mode in a CHILD process (the command its framework's adapter
gives: ``python -m hermes_nb.env_host process`` for hermes-nb's own environments), so a broken environment
cannot take the caller down; a local model is served by a temporary inference server
(``hermes_nb.inference.local``) that is stopped afterwards whatever happens. Models are tested concurrently.
Every failure (a broken environment, an unreachable endpoint, a server that would not start, a timeout) becomes
that model's outcome, never an exception. Files go to ``<home>/inference_tests/<timestamp>/``.

The environment reaches every model through a gateway on loopback in this process (``gateway.py``): an endpoint's
provider quirks (text-only answers, rate limits, chat-only models) and its key stay here, and each model's
requests, latency and tokens are counted. Without ``models``, the default set is the run's base model after a
small, a medium and a large hosted model when the provider's key is available (``hosted.py``). The result and its
text, HTML and JSON forms are in ``report.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from hermes_nb.config import BaseEnvConfig, RunConfig
from hermes_nb.errors import ConfigError, HermesNBError
from hermes_nb.frameworks import registry
from hermes_nb.frameworks.contract import ChildCommand, FrameworkAdapter, ModelTestRequest
from hermes_nb.model_test.hosted import HostedModelsConfig, how_to_add_hosted_models, load_hosted_config
from hermes_nb.model_test.results import (
    InferenceTestResult,
    ModelTestResult,
    Outcome,
    Status,
    read_details,
)
from hermes_nb.model_test.settings import EndpointSettings, EndpointStats
from hermes_nb.model_test.targets import ModelTarget, resolve_targets
from hermes_nb.protocol.run_files import CONFIG_FILE, INFERENCE_TESTS_DIR
from hermes_nb.protocol.trajectory import ScoredDataGroup
from hermes_nb.runs import prices
from hermes_nb.selection.current import current_run_config
from hermes_nb.system import home
from hermes_nb.system.processes import child_environment, failure_message, spawn_group

if TYPE_CHECKING:
    from hermes_nb.model_test.gateway import Gateway

logger = logging.getLogger(__name__)

DEFAULT_NUM_STEPS = 3
DEFAULT_GROUP_SIZE = 16
# Per model, server start + environment: 3 groups of 16 fit in 10 minutes on a CPU.
DEFAULT_TIMEOUT_S = 600.0
# Two cores are shared by every server started here: one torch thread each keeps them from thrashing.
DEFAULT_SERVER_THREADS = 1
# An endpoint that does not even accept a connection within this long is reported as unreachable.
PROBE_TIMEOUT_S = 10.0


class InferenceTestError(HermesNBError):
    """Arguments of ``rl_test_inference`` that cannot work (nothing was started)."""


@dataclass(frozen=True)
class _Plan:
    """What every model's test shares."""

    framework: FrameworkAdapter
    config: RunConfig  # the run's, with the test's group size
    config_path: Path
    output_dir: Path
    num_steps: int
    timeout_s: float
    threads: int | None
    hosted: HostedModelsConfig
    env_python: str  # the interpreter that runs the environment, as its framework's adapter checked it


@dataclass(frozen=True)
class _Files:
    output: Path
    env_log: Path
    server_log: Path
    stem: Path  # of the files a framework's test may add (an atroposlib one's settings and own groups file)


def _files(plan: _Plan, index: int, target: ModelTarget) -> _Files:
    # A directory is named by its last part; a run id or an endpoint by the whole reference.
    name = Path(target.reference).name if target.kind == "local" and "/" in target.reference else target.reference
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[-60:] or "model"
    stem = plan.output_dir / f"{index:02d}-{slug}"
    return _Files(Path(f"{stem}.jsonl"), Path(f"{stem}.env.log"), Path(f"{stem}.server.log"), stem)


async def rl_test_inference(
    num_steps: int = DEFAULT_NUM_STEPS,
    group_size: int = DEFAULT_GROUP_SIZE,
    models: str | list[str] | None = None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    threads: int | None = DEFAULT_SERVER_THREADS,
) -> InferenceTestResult:
    """Run the selected environment for ``num_steps`` groups of ``group_size`` against each model.

    ``models``: run ids (final checkpoint), ``"<run id>@best"``, checkpoint or model directories, ``"embedded"``,
    endpoints ``http(s)://host/v1[#model-name]`` or hosted model ids ``org/model``. Default: the run's base model,
    after a small, a medium and a large hosted model when ``OPENROUTER_API_KEY`` is available (environment,
    ``<home>/.env`` or ``~/.hermes/.env``; names and provider in ``<home>/hosted_models.yaml``). ``timeout_s``
    bounds each model. An endpoint's key is read from the provider's variable (OpenRouter URLs and hosted ids) or
    from the variable that ``HERMES_NB_TEST_API_KEY_ENV`` names, in this process only.
    """
    _check_arguments(num_steps, group_size, timeout_s)
    config = current_run_config()
    assert config.environment is not None  # current_run_config() raises when none is selected
    home.load_keys()  # a provider key may live in a .env file, and it decides the default model set
    hosted = load_hosted_config()
    targets = resolve_targets(models, config, hosted)
    framework = registry.adapter(config.environment.framework)
    framework.check_source(config)
    python = framework.python(config.environment.file)  # checked before anything is written
    plan = _plan(config, num_steps, group_size, timeout_s, threads, hosted, framework, python)
    # Imported here: the gateway brings the HTTP stack, which `import hermes_nb` and its core API do without.
    from hermes_nb.model_test.gateway import Gateway

    async with Gateway() as gateway, asyncio.TaskGroup() as group:
        tasks = [group.create_task(_test_one(plan, i, t, gateway)) for i, t in enumerate(targets, 1)]
    result = InferenceTestResult(
        environment=config.environment.name,
        environment_file=config.environment.file,
        num_steps=num_steps,
        group_size=group_size,
        output_dir=str(plan.output_dir),
        results=[task.result() for task in tasks],
        notes=[] if models or hosted.key_available() else [how_to_add_hosted_models(hosted)],
    )
    (plan.output_dir / "summary.json").write_text(json.dumps(result.to_dict(), indent=1), encoding="utf-8")
    return result


def _check_arguments(num_steps: int, group_size: int, timeout_s: float) -> None:
    if num_steps < 1:
        raise InferenceTestError(f"num_steps: must be at least 1 (got {num_steps})")
    if timeout_s <= 0:
        raise InferenceTestError(f"timeout_s: must be positive (got {timeout_s})")
    try:
        BaseEnvConfig(group_size=group_size)
    except ValidationError as exc:
        reason = exc.errors()[0]["msg"]
        raise InferenceTestError(f"group_size: {reason} (got {group_size})") from None


def _plan(
    config: RunConfig,
    num_steps: int,
    group_size: int,
    timeout_s: float,
    threads: int | None,
    hosted: HostedModelsConfig,
    framework: FrameworkAdapter,
    python: str,
) -> _Plan:
    output_dir = _new_output_dir()
    test_config = config.model_copy(update={"env": {**config.env, "group_size": group_size}})
    config_path = output_dir / CONFIG_FILE
    test_config.save(config_path)  # holds no key: keys are never part of a RunConfig
    return _Plan(framework, test_config, config_path, output_dir, num_steps, timeout_s, threads, hosted, python)


def _new_output_dir() -> Path:
    root = home.home_dir() / INFERENCE_TESTS_DIR
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for suffix in range(1000):
        path = root / (stamp if suffix == 0 else f"{stamp}-{suffix}")
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            continue
    raise InferenceTestError(f"{root}: could not create a new test directory for {stamp}")


async def _test_one(plan: _Plan, index: int, target: ModelTarget, gateway: Gateway) -> ModelTestResult:
    """Never raises (except on cancellation): every failure is this model's outcome."""
    from hermes_nb.inference.local import ServerStartError, serve_model

    files = _files(plan, index, target)
    started = time.monotonic()
    stats = EndpointStats()
    outcome: Outcome
    try:
        async with asyncio.timeout(plan.timeout_s):
            if target.kind == "endpoint":
                url = gateway.add_endpoint(str(index), EndpointSettings.for_target(target, plan.hosted), stats)
                outcome = await _test_endpoint(plan, target, files, url)
            else:
                trainer = plan.config.trainer  # a local model is served where the run would sample it
                served = serve_model(
                    Path(target.location), files.server_log, threads=plan.threads, device=trainer.device,
                    dtype=trainer.dtype,
                )  # fmt: skip
                async with served as local:
                    url = gateway.add_local(str(index), local, stats)
                    outcome = await _run_environment(plan, target, url, files)
    except ServerStartError as exc:
        outcome = Outcome(status="server_failed", error=str(exc))
    except TimeoutError:
        outcome = _counted(files, plan.num_steps, "timed_out", f"no result within timeout_s={plan.timeout_s:g} s")
    except Exception as exc:  # a per-model boundary: one model's surprise must not lose the others' results
        logger.exception("inference test of %s failed", target.reference)
        outcome = Outcome(status="env_failed", error=f"{type(exc).__name__}: {exc}")
    return _model_result(plan, target, files, _with_endpoint_trouble(outcome, stats), stats, started)


def _model_result(
    plan: _Plan, target: ModelTarget, files: _Files, outcome: Outcome, stats: EndpointStats, started: float
) -> ModelTestResult:
    details = read_details(files.output)
    return ModelTestResult(
        **outcome.model_dump(),
        model=target.reference,
        kind=target.kind,
        location=target.location,
        scale=target.scale,
        steps_requested=plan.num_steps,
        seconds=round(time.monotonic() - started, 2),
        output_file=str(files.output),
        log_file=str(files.env_log),
        server_log=str(files.server_log) if target.kind == "local" else None,
        format_failures=details.format_failures,
        step_details=details.steps,
        samples=details.samples,
        mean_latency_s=stats.mean_latency_s,
        price_usd=_price_usd(target, stats),
        **stats.model_dump(exclude={"latency_s", "rate_limit_wait_s", "answered", "last_error"}),
    )


def _price_usd(target: ModelTarget, stats: EndpointStats) -> float | None:
    """A hosted model's tokens by the user's price table (``runs/prices.py``), keyed by the model name sent to the
    endpoint; None for a local model or one without an entry. A table that cannot be read loses the figure, not
    the other models' results."""
    if target.kind != "endpoint" or not target.model_name:
        return None
    try:
        price = prices.price_of(target.model_name)
    except ConfigError as exc:
        logger.warning("no price for %s: %s", target.model_name, exc)
        return None
    return None if price is None else price.hosted_dollars(stats.prompt_tokens, stats.completion_tokens)


def _with_endpoint_trouble(outcome: Outcome, stats: EndpointStats) -> Outcome:
    """``outcome`` as the endpoint's side tells it: a model whose every completion was given up on (the provider
    kept failing) did not work, whatever the environment made of the empty answers; a failure names the
    endpoint's last error (a refused key, an unknown model), which the environment's log only wraps."""
    cause = f" (the endpoint's last error: {stats.last_error})" if stats.last_error else ""
    if outcome.status == "ok" and outcome.completions and stats.failed_completions >= outcome.completions:
        error = f"every completion failed at the endpoint after retries{cause}"
        return outcome.model_copy(update={"status": "endpoint_failed", "error": error})
    if outcome.status == "ok" or not cause:
        return outcome
    return outcome.model_copy(update={"error": (outcome.error or outcome.status) + cause})


async def _test_endpoint(plan: _Plan, target: ModelTarget, files: _Files, url: str) -> Outcome:
    if target.api_key_env and not os.environ.get(target.api_key_env):
        error = (
            f"{target.api_key_env} is not set: the endpoint {target.location} needs a key "
            f"(set it in the environment or in {home.home_dir() / '.env'})"
        )
        return Outcome(status="endpoint_failed", error=error)
    problem = await _probe(target.location)
    if problem:
        return Outcome(status="endpoint_failed", error=problem)
    return await _run_environment(plan, target, url, files)


async def _probe(url: str) -> str | None:
    """None when ``url`` accepts connections (any HTTP answer will do), else why not."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as client:
            await client.get(url.rstrip("/") + "/models")
    except httpx.TransportError as exc:
        return f"endpoint {url} is unreachable ({type(exc).__name__}: {exc or 'no answer'})"
    return None


def _env_command(plan: _Plan, target: ModelTarget, url: str, files: _Files) -> ChildCommand:
    """The environment's child for one model, as its framework's adapter runs a test."""
    request = ModelTestRequest(
        config=plan.config,
        config_path=plan.config_path,
        python=plan.env_python,
        base_environment=child_environment(),
        num_groups=plan.num_steps,
        group_size=int(plan.config.env_value("group_size")),
        model_url=url,
        model_name=target.model_name,
        local=target.kind == "local",
        output=files.output,
        stem=files.stem,
    )
    return plan.framework.model_test(request)


async def _run_environment(plan: _Plan, target: ModelTarget, url: str, files: _Files) -> Outcome:
    from hermes_nb.inference.local import POLL_S, stop_child

    command = _env_command(plan, target, url, files)
    command.write_files()
    proc = spawn_group(command.argv, files.env_log, command.environment)
    try:
        while proc.poll() is None:
            await asyncio.sleep(POLL_S)
    finally:
        await stop_child(proc)  # also ends what the environment started
    if proc.returncode != 0:
        return _counted(files, plan.num_steps, "env_failed", failure_message("the environment", proc, files.env_log))
    return _counted(files, plan.num_steps, "ok", None)


def _counted(files: _Files, requested: int, status: Status, error: str | None) -> Outcome:
    """Counts from the groups the environment wrote (also after a failure: what it did manage counts)."""
    steps, completions, correct = _read_groups(files.output)
    if status == "ok" and steps == 0:
        status = "no_groups"
        last = _last_exception(files.env_log)
        cause = f" (last error: {last})" if last else ""
        error = f"the environment wrote no scored group in {requested} step(s){cause}; see {files.env_log}"
    return Outcome(
        status=status,
        error=error,
        steps=steps,
        completions=completions,
        correct=correct,
        accuracy=round(correct / completions, 4) if completions else 0.0,
        step_success_rate=round(min(steps, requested) / requested, 4),
    )


# The closing line of a Python traceback: "RuntimeError: message", "pkg.mod.SomeError: ...", "KeyError".
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b(: .*)?$")


def _last_exception(log_path: Path) -> str | None:
    """The last exception an environment logged, so that the result says why it produced nothing."""
    if not log_path.is_file():
        return None
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    return next((line for line in reversed(lines) if _EXCEPTION_LINE.match(line)), None)


def _read_groups(path: Path) -> tuple[int, int, int]:
    """(groups, completions, correct completions) of a process-mode JSONL; a torn last line is skipped.

    Correct is the environment's verdict carried by each group (``ScoredDataGroup.verdicts``), as in training.
    """
    if not path.is_file():
        return 0, 0, 0
    steps = completions = correct = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            verdicts = ScoredDataGroup.model_validate(json.loads(line)["group"]).verdicts()
        except (ValueError, KeyError, TypeError):
            continue  # ValidationError is a ValueError
        steps += 1
        completions += len(verdicts)
        correct += sum(verdicts)
    return steps, completions, correct


__all__ = [
    "DEFAULT_GROUP_SIZE",
    "DEFAULT_NUM_STEPS",
    "InferenceTestError",
    "InferenceTestResult",
    "ModelTestResult",
    "Outcome",
    "rl_test_inference",
]
