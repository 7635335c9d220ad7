"""Loopback networking helpers: every server of a run binds 127.0.0.1 on a port the OS chose as free."""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"
# How long every server of a run keeps an idle HTTP connection open. It must outlast every client's own idle limit
# (httpx and the openai SDK: 5 s; aiohttp, atroposlib's: 15 s): when the two are equal (uvicorn's default is also
# 5 s), a client can send its next request on a connection at the moment the server closes it, and that request
# fails with "Server disconnected without sending a response", though the server is fine.
SERVER_KEEP_ALIVE_S = 75
# ... and how long hermes-nb's trajectory clients keep one: below the 5 s of servers it does not run (an atroposlib
# run-api is uvicorn with its default), so they never reuse a connection such a server may be closing.
CLIENT_KEEP_ALIVE_S = 2.0


def free_port(host: str = LOOPBACK) -> int:
    """A port that is free right now on ``host``. A race with another process is possible, so a launcher
    that gets ``EADDRINUSE`` retries with a new port rather than trusting this blindly."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
