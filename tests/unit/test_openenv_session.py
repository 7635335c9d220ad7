"""The OpenEnv session client against real OpenEnv servers, started on loopback in the OpenEnv side venv.

Each check runs as a child in that venv's Python (the session needs websockets, the server openenv), starting the
server with ``hermes_nb.frameworks.openenv.server.start_server``; the child prints one JSON line of what it saw.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from ci import skip_or_fail
from shipped_modules import shipped_module

from hermes_nb.protocol.tool_calls import template_data
from hermes_nb.system.side_python import env_python_environment

ROOT = Path(__file__).resolve().parents[2]
OPENENV_PYTHON = ROOT / ".venvs" / "openenv" / "bin" / "python"
EXAMPLE = ROOT / "environments" / "calculator_openenv.py"
BROKEN = ROOT / "tests" / "fixtures" / "openenv" / "broken_openenv.py"

PROLOGUE = """
import asyncio, json, sys
from pathlib import Path
from hermes_nb.frameworks.openenv.server import start_server
from hermes_nb.frameworks.openenv.session import OpenEnvSession, SessionError
async def main(file, log):
    server = await start_server(file, Path(log))
    seen = {}
    try:
        await body(server, seen)
    finally:
        server.stop()
    print(json.dumps(seen))
"""


def run_in_openenv(body: str, file: Path, tmp_path: Path) -> dict:
    if not OPENENV_PYTHON.exists():
        skip_or_fail(f"the OpenEnv side venv {OPENENV_PYTHON} (build it: sh scripts/side_env.sh openenv)")
    source = PROLOGUE + body + "\nasyncio.run(main(sys.argv[1], sys.argv[2]))\n"
    done = subprocess.run(
        [str(OPENENV_PYTHON), "-c", source, str(file), str(tmp_path / "server.log")],
        capture_output=True, text=True, timeout=240, env=env_python_environment({"PATH": "/usr/bin:/bin"}),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_episode_resets_calls_the_mcp_tool_and_steps_to_done(tmp_path):
    seen = run_in_openenv(
        """
async def body(server, seen):
    async with OpenEnvSession(server.url) as session:
        first = await session.reset(seed=3)
        seen["prompt"] = first.observation["prompt"]
        seen["tools"] = [t.as_tool_spec().function.name for t in await session.list_tools()]
        seen["tool"] = await session.call_tool("calculate", {"expression": "4*12"})
        seen["unknown"] = await session.call_tool("nope", {})
        last = await session.step({"message": "-1"})
        seen["last"] = [last.reward, last.done]
""",
        EXAMPLE,
        tmp_path,
    )
    assert seen["prompt"].endswith("?")
    assert seen["tools"] == ["calculate"]
    assert seen["tool"] == "48"
    assert seen["unknown"].startswith("error:")
    assert seen["last"] == [0.0, True]


def test_the_calculators_mcp_tool_renders_as_calculator_agents_tool_key_for_key(tmp_path):
    # The policy reads the tools block as text: the same task must show the same JSON, in the same key order.
    seen = run_in_openenv(
        """
from hermes_nb.protocol.tool_calls import template_data
async def body(server, seen):
    async with OpenEnvSession(server.url) as session:
        seen["tools"] = [json.dumps(template_data(t.as_tool_spec())) for t in await session.list_tools()]
""",
        EXAMPLE,
        tmp_path,
    )
    assert seen["tools"] == [json.dumps(template_data(shipped_module("calculator_agent").CALCULATE_TOOL))]


def test_sessions_are_separate_environments(tmp_path):
    seen = run_in_openenv(
        """
async def body(server, seen):
    async with OpenEnvSession(server.url) as a, OpenEnvSession(server.url) as b:
        pa = (await a.reset(seed=1)).observation["prompt"]
        pb = (await b.reset(seed=2)).observation["prompt"]
        seen["differ"] = pa != pb
        seen["a_again"] = (await a.step({"message": "x"})).done
""",
        EXAMPLE,
        tmp_path,
    )
    assert seen == {"differ": True, "a_again": True}


def test_a_loopback_session_is_not_compressed_unless_asked_and_plays_either_way(tmp_path):
    seen = run_in_openenv(
        """
async def body(server, seen):
    for name, compress in (("default", None), ("asked", True)):
        async with OpenEnvSession(server.url, compress=compress) as session:
            prompt = (await session.reset(seed=5)).observation["prompt"]
            seen[name] = [type(e).__name__ for e in session._connection.protocol.extensions], prompt
""",
        EXAMPLE,
        tmp_path,
    )
    assert seen["default"][0] == [] and seen["asked"][0] == ["PerMessageDeflate"]
    assert seen["default"][1] == seen["asked"][1]  # the same seed, the same problem, compressed or not


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (None, "failed in reset: reset exploded on seed 13"),
        ("nan", "the reward 'ten' is not a number"),
        ("die", "closed the session during step"),
    ],
)
def test_failures_are_one_clear_error(tmp_path, action, expected):
    seen = run_in_openenv(
        f"""
async def body(server, seen):
    try:
        async with OpenEnvSession(server.url) as session:
            await session.reset(seed=13 if {action!r} is None else 1)
            await session.step({{"message": {action!r}}})
    except Exception as exc:
        seen["error"] = f"{{type(exc).__name__}}: {{exc}}"
""",
        BROKEN,
        tmp_path,
    )
    assert expected in seen["error"]


def test_sessions_beyond_the_servers_capacity_wait_for_a_slot_and_all_play(tmp_path):
    # broken_openenv's server holds 4 sessions (max_concurrent_envs=4); 7 episodes want one each at once.
    seen = run_in_openenv(
        """
from hermes_nb.frameworks.openenv.slots import SessionSlots
async def body(server, seen):
    slots = SessionSlots()
    async def play():
        async with OpenEnvSession(server.url) as session:
            await session.reset(seed=1)
            await asyncio.sleep(0.3)  # all 7 want their session at once
            return (await session.step({"message": "x"})).reward
    seen["rewards"] = await asyncio.gather(*(slots.run(play) for _ in range(7)))
    seen["cap"] = slots.cap
""",
        BROKEN,
        tmp_path,
    )
    assert seen["rewards"] == [0.5] * 7
    assert seen["cap"] == 4  # learnt from the first refusal


def test_a_full_server_is_a_capacity_error_naming_its_limit(tmp_path):
    seen = run_in_openenv(
        """
from hermes_nb.frameworks.openenv.session import CapacityReached
async def body(server, seen):
    sessions = [OpenEnvSession(server.url) for _ in range(5)]
    for session in sessions[:4]:
        await session.__aenter__()
        await session.reset(seed=1)
    try:
        async with sessions[4] as fifth:
            await fifth.reset(seed=1)
    except CapacityReached as full:
        seen["max_sessions"], seen["error"] = full.max_sessions, str(full)
    for session in sessions[:4]:
        await session.__aexit__(None, None, None)
""",
        BROKEN,
        tmp_path,
    )
    assert seen["max_sessions"] == 4 and "max_concurrent_envs" in seen["error"]


def test_groups_hold_their_sessions_together_and_a_group_larger_than_the_server_is_refused(tmp_path):
    # broken_openenv's server holds 4 sessions: two groups of 3 cannot sit at once, so the second waits for the first
    # (never two half-seated groups waiting on each other); a group of 5 can never sit and is refused.
    seen = run_in_openenv(
        """
import contextlib
from hermes_nb.frameworks.openenv.session import CapacityReached
from hermes_nb.frameworks.openenv.slots import SessionSlots
async def body(server, seen):
    slots = SessionSlots()
    async def group(size):
        async with contextlib.AsyncExitStack() as stack:
            sessions = [await stack.enter_async_context(OpenEnvSession(server.url)) for _ in range(size)]
            for session in sessions:
                await session.reset(seed=1)
            await asyncio.sleep(0.3)  # both groups want their sessions at once
            return [(await s.step({"message": "x"})).reward for s in sessions]
    seen["rewards"] = await asyncio.gather(*(slots.run(lambda: group(3), 3) for _ in range(2)))
    seen["cap"] = slots.cap
    try:
        await slots.run(lambda: group(5), 5)
    except CapacityReached as full:
        seen["refused"] = full.max_sessions
""",
        BROKEN,
        tmp_path,
    )
    assert seen["rewards"] == [[0.5] * 3] * 2
    assert seen["cap"] == 4
    assert seen["refused"] == 4
