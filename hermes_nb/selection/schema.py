"""Read an environment's config schema in a child process, with a timeout, cached by the file's content.

Environment code is never imported into the caller (a notebook kernel): a broken or hostile environment can
raise, hang or crash only its own child process (``hermes_nb.selection.schema_child``), and the caller gets an
``EnvironmentLoadError`` with the last lines of the child's traceback. The child runs in the Python that will run
the environment (its framework's adapter, ``hermes_nb.frameworks``: the environment Python for an atroposlib one,
checked first).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from hermes_nb.config import DEFAULT_FRAMEWORK, EnvFramework
from hermes_nb.errors import EnvironmentLoadError
from hermes_nb.frameworks import registry
from hermes_nb.frameworks.contract import FrameworkAdapter
from hermes_nb.selection.schema_child import MARKER
from hermes_nb.system import home

logger = logging.getLogger(__name__)

# Importing an environment may load a dataset or a tokenizer; 30 s is generous for that and still bounds a hang.
SCHEMA_TIMEOUT_S = 30.0
TRACEBACK_TAIL_LINES = 8
# After its timeout the child gets SIGTERM and this long to write where it was stuck, then SIGKILL (a busy loop
# in C code, or an environment that replaced the SIGTERM handler, would not die otherwise).
HANG_DUMP_GRACE_S = 2.0
# A frame line of faulthandler's dump: '  File "/path/env.py", line 12 in config_init'.
_DUMP_FRAME = re.compile(r'^\s+File "(?P<file>.+)", line (?P<line>\d+) in (?P<func>.+)$')
# Bump when the child's answer changes shape, so old disk-cache entries are not read.
CACHE_VERSION = 3


class EnvSchema(BaseModel):
    """What the child reports: the ``config_init()`` values, the config class's JSON schema, the servers."""

    config_class: str
    json_schema: dict[str, Any]
    values: dict[str, Any]
    server_configs: list[dict[str, Any]] = Field(default_factory=list)
    # The trainer settings it declares it needs (``EnvironmentNeeds``'s fields; empty: none).
    needs: dict[str, Any] = Field(default_factory=dict)
    content_hash: str = ""


_MEMORY: dict[str, EnvSchema] = {}
_MEMORY_LOCK = threading.Lock()


async def read_schema(
    file: str,
    class_name: str,
    timeout: float = SCHEMA_TIMEOUT_S,
    *,
    framework: EnvFramework = DEFAULT_FRAMEWORK,
) -> EnvSchema:
    """The schema of ``class_name`` in ``file``; from cache when the file's content is unchanged."""
    return await asyncio.to_thread(read_schema_sync, file, class_name, timeout, framework=framework)


def read_schema_sync(
    file: str,
    class_name: str,
    timeout: float = SCHEMA_TIMEOUT_S,
    *,
    framework: EnvFramework = DEFAULT_FRAMEWORK,
) -> EnvSchema:
    adapter = registry.adapter(framework)
    try:
        content = Path(file).read_bytes()
    except OSError as exc:
        raise EnvironmentLoadError(f"environment file {file} cannot be read: {exc.strerror}") from None
    python = adapter.python(file)  # checked before anything is read, cached or not
    # Another interpreter may read the same file differently (another atroposlib): it has entries of its own.
    interpreter = hashlib.sha256(python.encode()).hexdigest()[:12]
    key = f"{hashlib.sha256(content).hexdigest()}-{class_name}-{interpreter}-v{CACHE_VERSION}"
    cached = _cache_get(key)
    if cached is not None:
        return cached
    schema = _run_child(file, class_name, timeout, python, adapter).model_copy(update={"content_hash": key})
    _cache_put(key, schema)
    return schema


def clear_memory_cache() -> None:
    with _MEMORY_LOCK:
        _MEMORY.clear()


def _cache_path(key: str) -> Path:
    return home.home_dir() / "cache" / "schema" / f"{key}.json"


def _cache_get(key: str) -> EnvSchema | None:
    with _MEMORY_LOCK:
        if key in _MEMORY:
            return _MEMORY[key]
    path = _cache_path(key)
    try:
        schema = EnvSchema.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError, ValueError):
        return None  # no entry, or a damaged one: read the schema again
    with _MEMORY_LOCK:
        _MEMORY[key] = schema
    return schema


def _cache_put(key: str, schema: EnvSchema) -> None:
    with _MEMORY_LOCK:
        _MEMORY[key] = schema
    path = _cache_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(schema.model_dump_json(), encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:  # the disk cache is an optimisation; the memory cache still holds it
        logger.warning("could not write schema cache %s: %s", path, exc)


def _child_env(python: str, adapter: FrameworkAdapter) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in home.KNOWN_KEYS}  # reading a config needs no key
    return adapter.schema_environment(python, base)


def _run_child(file: str, class_name: str, timeout: float, python: str, adapter: FrameworkAdapter) -> EnvSchema:
    cmd = [python, "-m", adapter.schema_module, file, class_name]
    where = f"{class_name} in {file}"
    # Own session, so that a timeout kills whatever the environment started too.
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=_child_env(python, adapter),
        start_new_session=True,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise _hang_error(file, where, timeout, _end_hung_child(proc)) from None
    if proc.returncode != 0:
        raise _load_error(f"importing {where} failed (exit code {proc.returncode})", stderr)
    return _parse_answer(stdout, stderr, where)


def _parse_answer(stdout: str, stderr: str, where: str) -> EnvSchema:
    lines = [line for line in stdout.splitlines() if line.startswith(MARKER)]
    if not lines:
        raise _load_error(f"reading the config of {where} gave no answer", stderr)
    try:
        return EnvSchema.model_validate(json.loads(lines[-1][len(MARKER) :]))
    except (ValueError, ValidationError) as exc:
        raise _load_error(f"the config of {where} is not readable: {exc}", stderr) from None


def _end_hung_child(proc: subprocess.Popen[str]) -> str:
    """SIGTERM (the child dumps its threads' stacks), a short grace, then SIGKILL to its whole session;
    returns its stderr."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        _, stderr = proc.communicate(timeout=HANG_DUMP_GRACE_S)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        _, stderr = proc.communicate()
    _kill_group(proc)  # whatever the environment started is in the child's session
    return stderr or ""


def _hang_error(file: str, where: str, timeout: float, stderr: str) -> EnvironmentLoadError:
    """Names the line the child was stuck on: its first frame in the environment file, else its innermost."""
    frames = [m for line in stderr.splitlines() if (m := _DUMP_FRAME.match(line))]
    env_file = str(Path(file).resolve())
    stuck = next((m for m in frames if m["file"] == env_file), frames[0] if frames else None)
    summary = f"reading the config of {where} timed out after {timeout:g} s"
    if stuck is not None:
        summary += f", stuck in {stuck['func'].strip()} at {stuck['file']}:{stuck['line']}"
    summary += (
        "; its import or config_init() hangs or loops (the environment's child process was stopped, "
        "nothing else waited for it)"
    )
    # The dump, innermost frame first, without the interpreter's own frames; else the child's last output.
    shown = [m.group(0).strip() for m in frames if not m["file"].startswith("<frozen")][:TRACEBACK_TAIL_LINES]
    tail = shown or [line for line in stderr.splitlines() if line.strip()][-TRACEBACK_TAIL_LINES:]
    error = EnvironmentLoadError("\n".join([summary, *tail]))
    error.traceback_tail = tail  # type: ignore[attr-defined]
    return error


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _load_error(summary: str, stderr: str) -> EnvironmentLoadError:
    tail = [line for line in (stderr or "").splitlines() if line.strip()][-TRACEBACK_TAIL_LINES:]
    message = summary if not tail else f"{summary}: {tail[-1].strip()}\n" + "\n".join(tail)
    error = EnvironmentLoadError(message)
    error.traceback_tail = tail  # type: ignore[attr-defined]
    return error
