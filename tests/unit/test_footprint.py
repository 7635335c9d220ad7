"""A process's footprint, and what some work left behind in it: threads, fds, children, listening ports."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from hermes_nb.system.footprint import footprint, leaks


@pytest.fixture
def stop_event() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def test_nothing_done_leaves_nothing() -> None:
    before = footprint()
    assert leaks(before, footprint()).none


def test_a_thread_still_running_is_named(stop_event: threading.Event) -> None:
    before = footprint()
    thread = threading.Thread(target=stop_event.wait, name="left-behind", daemon=True)
    thread.start()

    found = leaks(before, footprint())

    assert found.threads == ["left-behind"] and found.os_threads == 1
    assert not found.none


def test_a_listening_socket_and_a_child_are_counted() -> None:
    before = footprint()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        found = leaks(before, footprint())
        assert found.listening_ports == [server.getsockname()[1]]
        assert found.fds >= 1
        assert [c.split()[0] for c in found.children] == [str(child.pid)]
    finally:
        server.close()
        child.kill()
        child.wait()
    assert leaks(before, footprint()).none


def test_more_workers_of_an_asyncio_pool_are_reuse_but_a_new_pool_is_a_leak() -> None:
    async def use_the_pool(calls: int) -> None:
        await asyncio.gather(*(asyncio.to_thread(sum, [i]) for i in range(calls)))

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(use_the_pool(1))
        before = footprint()
        loop.run_until_complete(use_the_pool(3))
        grown = leaks(before, footprint())
        second = asyncio.new_event_loop()
        second.run_until_complete(use_the_pool(1))
        with_a_second_pool = leaks(before, footprint())
        second.run_until_complete(second.shutdown_default_executor())
        second.close()
    finally:
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()
    assert grown.threads == [] and grown.os_threads == 0
    assert "asyncio_0" in with_a_second_pool.threads and not with_a_second_pool.none
