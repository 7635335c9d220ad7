"""Environment packages installed into a framework's Python (``pip install``), found from their distributions'
metadata in that Python, never by importing them.

One short child in the framework's Python (``importlib.metadata``) lists the distributions that require the
framework (``verifiers``, ``openenv``): each is one environment package, named by its distribution name (the id
``vf-eval`` and the hub use); its folders are an editable install's project folder (``direct_url.json``), else the
top-level packages its installed files are in. The answer is cached by the state of that Python's
``site-packages`` folder (its mtime changes when a distribution is installed or removed), as discovery caches a
file's parse by the file's state.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

# Lists the distributions requiring one of argv[1:], as JSON: {"purelib": ..., "packages": [{name, folders}]}.
LIST_SOURCE = r"""
import importlib.metadata as m, json, re, sys, sysconfig
from pathlib import Path
from urllib.parse import unquote, urlparse
wanted = {w.lower().replace("_", "-") for w in sys.argv[1:]}
def requires(dist):
    names = {re.split(r"[\s;<>=!~\[(@]", r, maxsplit=1)[0].lower().replace("_", "-") for r in dist.requires or []}
    return bool(names & wanted)
def folders(dist):
    url = json.loads(dist.read_text("direct_url.json") or "{}")
    if url.get("dir_info", {}).get("editable"):
        return [unquote(urlparse(url["url"]).path)]
    tops = {f.parts[0] for f in dist.files or [] if len(f.parts) > 1 and f.suffix == ".py"}
    return sorted(str(dist.locate_file(t)) for t in tops if not t.endswith((".dist-info", ".egg-info")))
packages = [{"name": d.metadata["Name"], "folders": folders(d)} for d in m.distributions() if requires(d)]
print(json.dumps({"purelib": sysconfig.get_paths()["purelib"], "packages": packages}))
"""
# A cold Python importing importlib.metadata and reading every dist-info of a large venv: well under this.
LIST_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class InstalledPackage:
    name: str
    folders: tuple[str, ...]


@dataclass
class _Entry:
    purelib: str
    state: int  # the purelib folder's mtime_ns when listed
    packages: tuple[InstalledPackage, ...]


@dataclass
class _Cache:
    lock: threading.Lock = field(default_factory=threading.Lock)
    by_python: dict[tuple[str, tuple[str, ...]], _Entry | None] = field(default_factory=dict)


_CACHE = _Cache()


def installed_packages(python: str, frameworks: tuple[str, ...]) -> tuple[InstalledPackage, ...]:
    """The environment packages installed into ``python`` (those requiring one of ``frameworks``); none when
    ``python`` cannot answer (it is checked, with its message, where a run needs it)."""
    key = (python, frameworks)
    cached = _cached(key)
    if cached is not None:
        return cached
    entry = _list(python, frameworks)  # outside the lock: each framework's Python is asked at the same time
    with _CACHE.lock:
        _CACHE.by_python[key] = entry
    return entry.packages if entry is not None else ()


def installed_by_framework(pythons: dict[str, tuple[str, tuple[str, ...]]]) -> dict[str, tuple[InstalledPackage, ...]]:
    """``installed_packages`` of each framework (name -> its Python and requirement names), asked in parallel."""
    answers = {name: cached for name, request in pythons.items() if (cached := _cached(request)) is not None}
    asked = {name: request for name, request in pythons.items() if name not in answers}
    if not asked:
        return answers  # a warm scan: one stat per Python, no thread started
    with ThreadPoolExecutor(max_workers=len(asked)) as pool:
        futures = {name: pool.submit(installed_packages, *request) for name, request in asked.items()}
        return {**answers, **{name: future.result() for name, future in futures.items()}}


def _cached(key: tuple[str, tuple[str, ...]]) -> tuple[InstalledPackage, ...] | None:
    """The cached answer for ``key`` while its ``site-packages`` is unchanged; ``None``: ask its Python."""
    with _CACHE.lock:
        if key not in _CACHE.by_python:
            return None
        entry = _CACHE.by_python[key]
        if entry is None:
            return ()  # this Python did not answer: not asked again in this process
        return entry.packages if _mtime(entry.purelib) == entry.state else None


def clear_cache() -> None:
    with _CACHE.lock:
        _CACHE.by_python.clear()


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1


def _list(python: str, frameworks: tuple[str, ...]) -> _Entry | None:
    try:
        done = subprocess.run([python, "-I", "-c", LIST_SOURCE, *frameworks], capture_output=True, text=True,
                              timeout=LIST_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
        answer = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    if not isinstance(answer, dict):
        return None
    purelib = str(answer["purelib"])
    packages = tuple(InstalledPackage(str(p["name"]), tuple(map(str, p["folders"]))) for p in answer["packages"])
    return _Entry(purelib=purelib, state=_mtime(purelib), packages=packages)
