"""``await rl_test_inference(num_steps, group_size, models)``: does the selected environment work, and how well
does each model do on it, before a run is spent?

Per model, the environment runs in ``process`` mode in a CHILD process (``python -m hermes_nb.env process``), so
a broken environment cannot take the caller down; a local model is served by a temporary inference server
(``hermes_nb.inference.local``) that is stopped afterwards whatever happens. Models are tested concurrently.
Every failure (a broken environment, an unreachable endpoint, a server that would not start, a timeout) becomes
that model's outcome, never an exception. Files go to ``<home>/inference_tests/<timestamp>/``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from hermes_nb import home
from hermes_nb.config import RunConfig
from hermes_nb.env.config import BaseEnvConfig
from hermes_nb.errors import HermesNBError
from hermes_nb.inference_targets import ModelTarget, resolve_targets
from hermes_nb.results import Result, _table

logger = logging.getLogger(__name__)

DEFAULT_NUM_STEPS = 3
DEFAULT_GROUP_SIZE = 16
# Per model, server start + environment: the original tool's 10 minutes, which 3 groups of 16 fit on a CPU.
DEFAULT_TIMEOUT_S = 600.0
# Two cores are shared by every server started here: one torch thread each keeps them from thrashing.
DEFAULT_SERVER_THREADS = 1
# An endpoint that does not even accept a connection within this long is reported as unreachable.
PROBE_TIMEOUT_S = 10.0
# Same convention as process mode: a completion scoring at least 1.0 is correct.
CORRECT_SCORE = 1.0
TESTS_DIR = "inference_tests"

Status = Literal["ok", "no_groups", "env_failed", "server_failed", "endpoint_failed", "timed_out"]


class InferenceTestError(HermesNBError):
    """Arguments of ``rl_test_inference`` that cannot work (nothing was started)."""


class Outcome(BaseModel):
    """How one model's test ended, and what it counted before that."""

    status: Status
    error: str | None = None
    steps: int = 0  # scored groups written
    completions: int = 0
    correct: int = 0
    accuracy: float = 0.0
    step_success_rate: float = 0.0  # steps / steps_requested


class ModelTestResult(Outcome):
    """What one model did on the environment."""

    model: str  # the reference as given
    kind: Literal["local", "endpoint"]
    location: str  # model directory or endpoint URL (never a key)
    steps_requested: int
    seconds: float = 0.0
    output_file: str | None = None
    log_file: str | None = None  # the environment's log
    server_log: str | None = None  # the temporary inference server's log (local models)

    @property
    def succeeded(self) -> bool:
        return self.status == "ok"


class InferenceTestResult(Result):
    environment: str
    environment_file: str
    num_steps: int
    group_size: int
    output_dir: str
    results: list[ModelTestResult] = Field(default_factory=list)

    @property
    def working(self) -> list[ModelTestResult]:
        """Models that produced at least one scored group."""
        return [r for r in self.results if r.steps > 0]

    @property
    def models_succeeded(self) -> int:
        return sum(1 for r in self.results if r.succeeded)

    @property
    def best_model(self) -> str | None:
        working = self.working
        return max(working, key=lambda r: r.accuracy).model if working else None

    @property
    def average_accuracy(self) -> float:
        working = self.working
        return round(sum(r.accuracy for r in working) / len(working), 4) if working else 0.0

    @property
    def environment_works(self) -> bool:
        return bool(self.working)

    def summary(self) -> dict[str, Any]:
        return {
            "steps_requested": self.num_steps,
            "models_tested": len(self.results),
            "models_succeeded": self.models_succeeded,
            "best_model": self.best_model,
            "avg_accuracy": self.average_accuracy,
            "environment_working": self.environment_works,
            "environment_works": self.environment_works,
            "output_directory": self.output_dir,
        }

    def _dict(self) -> dict[str, Any]:
        rollouts = self.num_steps * self.group_size
        return {
            "environment": self.environment,
            "environment_file": self.environment_file,
            "test_config": {
                "num_steps": self.num_steps,
                "group_size": self.group_size,
                "rollouts_per_model": rollouts,
                "total_rollouts": rollouts * len(self.results),
            },
            "total_models": len(self.results),
            "successful_models": self.models_succeeded,
            "models_tested": [_model_dict(r) for r in self.results],
            "summary": self.summary(),
        }

    def _text_lines(self) -> list[str]:
        lines = [
            f"inference test of {self.environment}: {self.num_steps} steps x {self.group_size} completions per model",
        ]
        for r in self.results:
            lines.append(
                f"  {r.model}: {r.status}, {r.correct}/{r.completions} correct ({r.accuracy:.1%}), "
                f"{r.steps}/{r.steps_requested} steps"
            )
            if r.error:
                lines.append(f"    error: {_first_line(r.error)}")
        works = "works" if self.environment_works else "does NOT work (no model produced a scored group)"
        lines.append(
            f"environment {works}; best model: {self.best_model}; average accuracy {self.average_accuracy:.1%}"
        )
        lines.append(f"files: {self.output_dir}")
        return lines

    def _html_body(self) -> str:
        rows = [
            [r.model, r.status, f"{r.accuracy:.1%}", *_counts(r), _first_line(r.error), r.output_file or ""]
            for r in self.results
        ]
        headers = ["model", "status", "accuracy", "correct", "steps", "error", "output"]
        works = "works" if self.environment_works else "does <b>not</b> work"
        return f"<p>Environment {works}; best model: {self.best_model}</p>" + _table(headers, rows)


def _counts(r: ModelTestResult) -> list[str]:
    return [f"{r.correct}/{r.completions}", f"{r.steps}/{r.steps_requested}"]


def _first_line(text: str | None) -> str:
    return text.splitlines()[0] if text else ""


def _model_dict(r: ModelTestResult) -> dict[str, Any]:
    """The original tool's per-model keys, plus ours."""
    return {
        "model": r.model,
        "kind": r.kind,
        "location": r.location,
        "status": r.status,
        "steps_tested": r.steps,
        "steps_requested": r.steps_requested,
        "total_completions": r.completions,
        "correct_completions": r.correct,
        "accuracy": r.accuracy,
        "step_success_rate": r.step_success_rate,
        "seconds": r.seconds,
        "output_file": r.output_file,
        "log_file": r.log_file,
        "server_log": r.server_log,
        "error": r.error,
    }


@dataclass(frozen=True)
class _Plan:
    """What every model's test shares."""

    env_spec: str  # path/to/env.py:ClassName
    config_path: Path
    output_dir: Path
    num_steps: int
    timeout_s: float
    threads: int | None


@dataclass(frozen=True)
class _Files:
    output: Path
    env_log: Path
    server_log: Path


def _files(plan: _Plan, index: int, target: ModelTarget) -> _Files:
    # A directory is named by its last part; a run id or an endpoint by the whole reference.
    name = Path(target.reference).name if target.kind == "local" and "/" in target.reference else target.reference
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[-60:] or "model"
    stem = plan.output_dir / f"{index:02d}-{slug}"
    return _Files(Path(f"{stem}.jsonl"), Path(f"{stem}.env.log"), Path(f"{stem}.server.log"))


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
    or endpoints ``http(s)://host/v1[#model-name]``; default the run's base model. ``timeout_s`` bounds each model.
    An endpoint's key is read from ``OPENROUTER_API_KEY`` (OpenRouter URLs) or from the variable that
    ``HERMES_NB_TEST_API_KEY_ENV`` names; it reaches the environment process through its environment only.
    """
    from hermes_nb import api

    _check_arguments(num_steps, group_size, timeout_s)
    config = api.current_run_config()
    assert config.environment is not None  # current_run_config() raises when none is selected
    targets = resolve_targets(models, config)
    home.load_keys()  # an endpoint key may live in a .env file; the environment child inherits it
    plan = _plan(config, num_steps, group_size, timeout_s, threads)
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(_test_one(plan, i, t)) for i, t in enumerate(targets, 1)]
    result = InferenceTestResult(
        environment=config.environment.name,
        environment_file=config.environment.file,
        num_steps=num_steps,
        group_size=group_size,
        output_dir=str(plan.output_dir),
        results=[task.result() for task in tasks],
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


def _plan(config: RunConfig, num_steps: int, group_size: int, timeout_s: float, threads: int | None) -> _Plan:
    assert config.environment is not None
    output_dir = _new_output_dir()
    test_config = config.model_copy(update={"env": {**config.env, "group_size": group_size}})
    config_path = output_dir / "config.yaml"
    test_config.save(config_path)  # holds no key: keys are never part of a RunConfig
    spec = f"{config.environment.file}:{config.environment.class_name}"
    return _Plan(spec, config_path, output_dir, num_steps, timeout_s, threads)


def _new_output_dir() -> Path:
    root = home.home_dir() / TESTS_DIR
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for suffix in range(1000):
        path = root / (stamp if suffix == 0 else f"{stamp}-{suffix}")
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            continue
    raise InferenceTestError(f"{root}: could not create a new test directory for {stamp}")


async def _test_one(plan: _Plan, index: int, target: ModelTarget) -> ModelTestResult:
    """Never raises (except on cancellation): every failure is this model's outcome."""
    from hermes_nb.inference.local import ServerStartError, serve_model

    files = _files(plan, index, target)
    started = time.monotonic()
    outcome: Outcome
    try:
        async with asyncio.timeout(plan.timeout_s):
            if target.kind == "endpoint":
                outcome = await _test_endpoint(plan, target, files)
            else:
                async with serve_model(Path(target.location), files.server_log, threads=plan.threads) as url:
                    outcome = await _run_environment(plan, target, url, files)
    except ServerStartError as exc:
        outcome = Outcome(status="server_failed", error=str(exc))
    except TimeoutError:
        outcome = _counted(files, plan.num_steps, "timed_out", f"no result within timeout_s={plan.timeout_s:g} s")
    except Exception as exc:  # a per-model boundary: one model's surprise must not lose the others' results
        logger.exception("inference test of %s failed", target.reference)
        outcome = Outcome(status="env_failed", error=f"{type(exc).__name__}: {exc}")
    return ModelTestResult(
        **outcome.model_dump(),
        model=target.reference,
        kind=target.kind,
        location=target.location,
        steps_requested=plan.num_steps,
        seconds=round(time.monotonic() - started, 2),
        output_file=str(files.output),
        log_file=str(files.env_log),
        server_log=str(files.server_log) if target.kind == "local" else None,
    )


async def _test_endpoint(plan: _Plan, target: ModelTarget, files: _Files) -> Outcome:
    if target.api_key_env and not os.environ.get(target.api_key_env):
        error = (
            f"{target.api_key_env} is not set: the endpoint {target.location} needs a key "
            f"(set it in the environment or in {home.home_dir() / '.env'})"
        )
        return Outcome(status="endpoint_failed", error=error)
    problem = await _probe(target.location)
    if problem:
        return Outcome(status="endpoint_failed", error=problem)
    return await _run_environment(plan, target, target.location, files)


async def _probe(url: str) -> str | None:
    """None when ``url`` accepts connections (any HTTP answer will do), else why not."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as client:
            await client.get(url.rstrip("/") + "/models")
    except httpx.TransportError as exc:
        return f"endpoint {url} is unreachable ({type(exc).__name__}: {exc or 'no answer'})"
    return None


def _env_argv(plan: _Plan, target: ModelTarget, url: str, files: _Files) -> list[str]:
    argv = [sys.executable, "-m", "hermes_nb.env", "process", plan.env_spec, "--num-groups", str(plan.num_steps)]
    argv += ["--output", str(files.output), "--inference-url", url, "--config", str(plan.config_path)]
    if target.model_name:
        argv += ["--model-name", target.model_name]
    if target.api_key_env:
        argv += ["--api-key-env", target.api_key_env]  # the variable's name; the child reads the key itself
    return argv


async def _run_environment(plan: _Plan, target: ModelTarget, url: str, files: _Files) -> Outcome:
    from hermes_nb.inference.local import POLL_S, child_environment, failure_message, spawn_group, stop_process_group

    proc = spawn_group(_env_argv(plan, target, url, files), files.env_log, child_environment())
    try:
        while proc.poll() is None:
            await asyncio.sleep(POLL_S)
    finally:
        await stop_process_group(proc)  # also ends what the environment started
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
    """(groups, completions, correct completions) of a process-mode JSONL; a torn last line is skipped."""
    if not path.is_file():
        return 0, 0, 0
    steps = completions = correct = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            scores = json.loads(line).get("scores", [])
        except (ValueError, AttributeError):
            continue
        steps += 1
        completions += len(scores)
        correct += sum(1 for s in scores if s >= CORRECT_SCORE)
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
