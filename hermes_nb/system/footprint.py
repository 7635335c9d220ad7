"""What one process holds from the OS: threads, open file descriptors, child processes, listening ports, memory.

Taken before and after some work (start and stop runs from a kernel, say), two footprints tell what the work
left behind. Read from inside the process itself, because only it can name its Python threads.
"""

from __future__ import annotations

import os
import threading

import psutil
from pydantic import BaseModel, ConfigDict

# Workers of asyncio's default executor (``asyncio.to_thread``), one pool per event loop, named ``asyncio_N`` by
# the pool (N counts within the pool). A pool keeps its workers for reuse, up to a fixed ceiling, so new workers
# of a pool that was there before are not leaks; a new pool (one more ``asyncio_0``: an event loop left behind)
# is.
POOL_THREAD_PREFIX = "asyncio_"
POOL_FIRST_WORKER = "asyncio_0"


class Footprint(BaseModel):
    model_config = ConfigDict(frozen=True)

    pid: int
    threads: list[str]  # Python threads by name (``threading.enumerate``); only for the calling process
    os_threads: int  # every thread the OS counts, native ones (zmq, OpenMP) included
    fds: int
    fd_targets: list[str] = []  # what each fd points at (``/proc/PID/fd``; empty where there is no /proc)
    children: list[str]  # "pid command line" of every descendant; an unreaped one is marked "(zombie)"
    listening_ports: list[int]
    rss_bytes: int


class Leaks(BaseModel):
    """What ``after`` holds that ``before`` did not (each list empty when nothing was left behind)."""

    threads: list[str]
    os_threads: int
    fds: int
    new_fd_targets: list[str]
    children: list[str]
    listening_ports: list[int]
    rss_growth_bytes: int

    @property
    def none(self) -> bool:
        return not (self.threads or self.os_threads > 0 or self.fds > 0 or self.children or self.listening_ports)

    def describe(self) -> str:
        return (
            f"threads +{len(self.threads)} {self.threads} (OS threads {self.os_threads:+d}), fds {self.fds:+d}, "
            f"{self.new_fd_targets[:10]}, children {self.children}, listening ports {self.listening_ports}, "
            f"RSS {self.rss_growth_bytes / 2**20:+.1f} MiB"
        )


def footprint(pid: int | None = None) -> Footprint:
    """The footprint of this process (threads are named only for this one; another's are counted)."""
    proc = psutil.Process(pid)
    own = pid is None or pid == os.getpid()
    return Footprint(
        pid=proc.pid,
        threads=sorted(t.name for t in threading.enumerate()) if own else [],
        os_threads=proc.num_threads(),
        fds=proc.num_fds(),
        fd_targets=_fd_targets(proc.pid),
        children=sorted(_describe(child) for child in proc.children(recursive=True)),
        listening_ports=sorted({c.laddr.port for c in proc.net_connections("inet") if c.status == "LISTEN"}),
        rss_bytes=proc.memory_info().rss,
    )


def leaks(before: Footprint, after: Footprint) -> Leaks:
    return Leaks(
        threads=_new_threads(before.threads, after.threads),
        os_threads=after.os_threads - before.os_threads - _pool_growth(before.threads, after.threads),
        fds=after.fds - before.fds,
        new_fd_targets=_new_items(before.fd_targets, after.fd_targets),
        children=[c for c in after.children if c not in before.children],
        listening_ports=[p for p in after.listening_ports if p not in before.listening_ports],
        rss_growth_bytes=after.rss_bytes - before.rss_bytes,
    )


def _new_items(before: list[str], after: list[str]) -> list[str]:
    """``after`` less ``before``, as multisets (two threads, or two fds, may share a name)."""
    remaining = list(before)
    new = []
    for name in after:
        if name in remaining:
            remaining.remove(name)
        else:
            new.append(name)
    return new


def _fd_targets(pid: int) -> list[str]:
    folder = f"/proc/{pid}/fd"
    targets = []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        try:
            targets.append(os.readlink(f"{folder}/{name}"))
        except OSError:
            continue  # closed since the listing (the listing's own fd among them)
    return sorted(targets)


def _new_threads(before: list[str], after: list[str]) -> list[str]:
    new = _new_items(before, after)
    if _new_pools(before, after):
        return new
    return [name for name in new if not name.startswith(POOL_THREAD_PREFIX)]


def _new_pools(before: list[str], after: list[str]) -> bool:
    return after.count(POOL_FIRST_WORKER) > before.count(POOL_FIRST_WORKER)


def _pool_growth(before: list[str], after: list[str]) -> int:
    """New workers of pools that were there before (the OS counts them too): reuse, not leaks."""
    if _new_pools(before, after):
        return 0
    pooled = [sum(1 for name in names if name.startswith(POOL_THREAD_PREFIX)) for names in (before, after)]
    return max(0, pooled[1] - pooled[0])


def _describe(proc: psutil.Process) -> str:
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return f"{proc.pid} (zombie)"
        return f"{proc.pid} {' '.join(proc.cmdline())}"
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return str(proc.pid)
