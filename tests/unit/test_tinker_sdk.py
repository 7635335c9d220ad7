"""Every tinker SDK call the Tinker backend makes exists, with the keyword arguments it passes, in the SDK the test
server speaks (hermes-nb's venv: 0.24.1) and in the newest SDK (the ``tinker-latest`` side environment).

``hermes_nb.tinker.calls.SDK_CALLS`` lists the calls; the first test reads the source of the Tinker modules
and fails on any SDK call missing from that list, so the list cannot drift from the code.
"""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
from pathlib import Path

import pytest
from side_envs import side_env_python

import hermes_nb
from hermes_nb.tinker.calls import SDK_ALTERNATIVES, SDK_CALLS

PACKAGE = Path(hermes_nb.__file__).resolve().parent
TINKER_MODULES = sorted((PACKAGE / "tinker").glob("*.py"))
TYPES = ("Datum", "AdamParams", "SamplingParams")

# Run in the interpreter of the SDK checked: for each list of calls given (JSON), the calls that do not bind.
CHECK_SCRIPT = """
import importlib, inspect, json, sys, tinker

def resolve(owner):
    # The SDK class named owner: exported by tinker, or (RestClient) only by its own module.
    found = getattr(tinker, owner, None)
    if found is None:
        module = "tinker.lib.public_interfaces." + "".join("_" + c.lower() if c.isupper() else c for c in owner)[1:]
        found = getattr(importlib.import_module(module), owner, None)
    return found

def problems_of(calls):
    problems = []
    for owner, method, keywords in calls:
        target = resolve(owner)
        function = getattr(target, method, None) if target is not None else None
        if function is None:
            problems.append(f"{owner}.{method}: missing")
            continue
        # A constructor binds through the class, a classmethod is bound already; a plain method still wants self.
        unbound = method != "__init__" and not inspect.ismethod(function)
        signature = inspect.signature(target if method == "__init__" else function)
        try:
            signature.bind_partial(*([None] if unbound else []), **{k: None for k in keywords})
        except TypeError as exc:
            problems.append(f"{owner}.{method}({', '.join(keywords)}): {exc}")
    return problems

print(json.dumps({"version": tinker.__version__, "problems": [problems_of(c) for c in json.loads(sys.argv[1])]}))
"""


def sdk_calls_in_source() -> set[tuple[str, str, tuple[str, ...]]]:
    """(owner, method, keywords) of every call in the Tinker modules whose name is an SDK client method or type."""
    import tinker
    from tinker.lib.public_interfaces.rest_client import RestClient

    classes = {"ServiceClient": tinker.ServiceClient, "TrainingClient": tinker.TrainingClient}
    classes |= {"SamplingClient": tinker.SamplingClient, "RestClient": RestClient}
    methods: dict[str, list[str]] = {}
    for owner, cls in classes.items():
        for name, _ in inspect.getmembers(cls, inspect.isfunction):
            if not name.startswith("_"):
                methods.setdefault(name, []).append(owner)
    found = set()
    for path in TINKER_MODULES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            name, keywords = node.func.attr, tuple(sorted(k.arg for k in node.keywords if k.arg))
            if name in (*TYPES, "ServiceClient"):
                found.add((name, "__init__", keywords))
            elif name == "from_ints":
                found.add(("ModelInput", name, keywords))
            elif name in methods:
                # A name several clients have (create_sampling_client) is declared for one of them.
                owners = [o for o in methods[name] if (o, name, keywords) in declared()] or methods[name]
                found.add((owners[0], name, keywords))
    return found


def declared() -> set[tuple[str, str, tuple[str, ...]]]:
    alternatives = [call for group in SDK_ALTERNATIVES.values() for option in group for call in option]
    return {(owner, method, tuple(sorted(keywords))) for owner, method, keywords in [*SDK_CALLS, *alternatives]}


def test_every_sdk_call_in_the_tinker_modules_is_declared_in_sdk_calls() -> None:
    undeclared = {call for call in sdk_calls_in_source() if call not in declared()}

    assert undeclared == set(), f"add these to tinker_calls.SDK_CALLS: {sorted(undeclared)}"


def _check_in(python: Path | str) -> dict[str, object]:
    """The SDK's version, and the problems of SDK_CALLS plus those of each group of alternatives none of which
    binds whole (one child process checks every list)."""
    lists = [list(SDK_CALLS), *[list(option) for options in SDK_ALTERNATIVES.values() for option in options]]
    done = subprocess.run(
        [str(python), "-c", CHECK_SCRIPT, json.dumps(lists)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    found = iter(result["problems"])
    problems: list[str] = next(found)
    for what, options in SDK_ALTERNATIVES.items():
        per_option = [next(found) for _ in options]
        if all(per_option):
            problems.append(f"{what}: no alternative is complete: {per_option}")
    return {"version": result["version"], "problems": problems}


def test_every_declared_call_binds_in_the_sdk_the_test_server_speaks() -> None:
    import sys

    result = _check_in(sys.executable)

    assert result["version"] == "0.24.1"
    assert result["problems"] == []


@pytest.mark.slow
def test_every_declared_call_binds_in_the_newest_sdk() -> None:
    result = _check_in(side_env_python("tinker-latest"))

    assert result["problems"] == [], f"tinker {result['version']}"
