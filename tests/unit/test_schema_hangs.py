"""Selecting an environment whose import or ``config_init`` hangs or loops: stopped after the timeout, with an
error naming the line it was stuck on, its child processes gone, and the caller's event loop (a kernel's) free."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import psutil
import pytest
from core_env_files import write_env

from hermes_nb.errors import EnvironmentLoadError
from hermes_nb.selection import schema

# No import of hermes_nb: on a busy machine that alone can outlast a short timeout, and the error would then
# (rightly) name the import line instead of config_init.
LOOPING_CONFIG_INIT = """
class Looping:
    @classmethod
    def config_init(cls):
        spins = 0
        while True:
            spins += 1
"""
# Long enough for the child's interpreter to start on two busy cores, so that it is stuck where the test says.
TIMEOUT_S = 3.0

HANGING_IMPORT_WITH_A_CHILD = """
import subprocess
import sys
import time

helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open({pid_file!r}, "w").write(str(helper.pid))
time.sleep(120)
"""


@pytest.fixture(autouse=True)
def _fresh_memory_cache() -> None:
    schema.clear_memory_cache()


def test_a_config_init_that_loops_is_stopped_with_the_line_it_was_stuck_on(tmp_path: Path) -> None:
    path = write_env(tmp_path, "looping.py", LOOPING_CONFIG_INIT)
    started = time.monotonic()
    with pytest.raises(EnvironmentLoadError) as info:
        schema.read_schema_sync(str(path), "Looping", timeout=TIMEOUT_S)
    elapsed = time.monotonic() - started

    first = str(info.value).splitlines()[0]
    assert first.startswith(f"reading the config of Looping in {path} timed out after 3 s")
    stuck = re.escape(f"stuck in config_init at {path.resolve()}:")
    assert re.search(stuck + "(5|6);", first), first  # `while True:` or `spins += 1`, wherever SIGTERM landed
    assert "config_init() hangs or loops" in first
    # Its own timeout and the dump's grace, with room for a loaded machine: a read that hangs never returns.
    assert elapsed < TIMEOUT_S + schema.HANG_DUMP_GRACE_S + 20


def test_a_hanging_import_is_stopped_with_every_process_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "helper.pid"
    path = write_env(tmp_path, "hangs.py", HANGING_IMPORT_WITH_A_CHILD.format(pid_file=str(pid_file)))
    with pytest.raises(EnvironmentLoadError, match=re.escape(f"stuck in <module> at {path.resolve()}:7")):  # sleep
        schema.read_schema_sync(str(path), "Hangs", timeout=TIMEOUT_S)

    helper = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while psutil.pid_exists(helper) and psutil.Process(helper).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the environment's own child outlived the timeout"
        time.sleep(0.05)


def test_the_callers_event_loop_keeps_running_while_a_config_init_hangs(tmp_path: Path) -> None:
    path = write_env(tmp_path, "looping.py", LOOPING_CONFIG_INIT)

    async def scenario() -> tuple[int, float]:
        ticks = 0
        longest_gap = 0.0

        async def tick() -> None:
            nonlocal ticks, longest_gap
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.05)
                now = time.monotonic()
                ticks, longest_gap = ticks + 1, max(longest_gap, now - last)
                last = now

        ticker = asyncio.create_task(tick())
        with pytest.raises(EnvironmentLoadError, match="timed out after 1 s"):
            await schema.read_schema(str(path), "Looping", timeout=1.0)
        ticker.cancel()
        return ticks, longest_gap

    ticks, longest_gap = asyncio.run(scenario())
    assert ticks >= 10  # at least 1 s of the timeout's 1 s, ticking every 50 ms
    assert longest_gap < 0.5
