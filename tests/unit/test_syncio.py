"""run_sync: from plain sync code, inside a running loop (as in a kernel), nested, and in a real IPython kernel."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_nb.syncio import run_sync

REPO_ROOT = Path(__file__).resolve().parents[2]


async def work(x: int) -> int:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "print(41)", stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    return int(out) + await asyncio.to_thread(lambda: x)


async def fail() -> None:
    raise ValueError("boom")


def test_without_a_running_loop() -> None:
    assert run_sync(work(1)) == 42


def test_exceptions_propagate() -> None:
    with pytest.raises(ValueError, match="boom"):
        run_sync(fail())


# Re-entering a running loop applies nest-asyncio2, which patches asyncio for the whole process (pure-Python tasks,
# asyncio.run replaced). Those cases run in a fresh interpreter, so this pytest process is never patched.
WORK = """
import asyncio, sys
from hermes_nb.syncio import run_sync

async def work(x):
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "print(41)", stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    return int(out) + await asyncio.to_thread(lambda: x)
"""


def in_fresh_python(code: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", WORK + code], capture_output=True, text=True, env=env, timeout=60, cwd=REPO_ROOT
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.fixture(autouse=True)
def _this_process_stays_unpatched() -> Iterator[None]:
    yield
    assert not hasattr(asyncio, "_nest_patched"), "a test patched asyncio in the pytest process"


def test_inside_a_running_loop_like_a_kernel_cell() -> None:
    code = """
async def cell():
    event = asyncio.Event()  # bound to this (the "kernel's") loop
    asyncio.get_running_loop().call_later(0.01, event.set)

    async def wait():
        await asyncio.wait_for(event.wait(), 5)
        return "set"

    return run_sync(work(1)), run_sync(wait())

print(*asyncio.run(cell()), hasattr(asyncio, "_nest_patched"))
"""
    assert in_fresh_python(code) == ["42", "set", "True"]


def test_nested_calls_work() -> None:
    code = """
async def outer():
    return run_sync(work(2)) + 1

print(run_sync(outer()))
"""
    assert in_fresh_python(code) == ["44"]


def test_from_sync_code_nothing_is_patched() -> None:
    assert run_sync(work(1)) == 42
    assert not hasattr(asyncio, "_nest_patched")


def test_from_another_thread() -> None:
    results: list[int] = []
    thread = threading.Thread(target=lambda: results.append(run_sync(work(1))))
    thread.start()
    thread.join(30)
    assert results == [42]


def test_in_a_real_ipython_kernel() -> None:
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")
    try:
        code = f"""
import asyncio, sys
sys.path.insert(0, {str(REPO_ROOT)!r})
from hermes_nb import run_sync
ticks = []
async def ticker():
    while True:
        ticks.append(1)
        await asyncio.sleep(0.01)
task = asyncio.get_running_loop().create_task(ticker())
ev = asyncio.Event()
asyncio.get_running_loop().call_later(0.05, ev.set)
run_sync(asyncio.wait_for(ev.wait(), 5))
run_sync(asyncio.sleep(0.3))
task.cancel()
print("ok", len(ticks) > 5)
"""
        lines: list[str] = []
        reply = kc.execute_interactive(
            code,
            timeout=60,
            output_hook=lambda m: lines.append(m["content"].get("text", "")) if m["msg_type"] == "stream" else None,
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        assert "".join(lines).strip() == "ok True"  # the kernel loop's own tasks ran during the sync call
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
