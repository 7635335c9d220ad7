"""Loopback networking helpers: every server of a run binds 127.0.0.1 on a port the OS chose as free."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A port that is free right now on ``host``. A race with another process is possible, so a launcher
    that gets ``EADDRINUSE`` retries with a new port rather than trusting this blindly."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
