"""Idle connections never die under a request. Every HTTP server of a run (the trajectory API, the inference
server, the model test's gateway) keeps an idle connection open longer than its clients keep one (httpx and the
openai SDK: 5 s); hermes-nb's trajectory clients drop theirs before servers it does not run close them (an
atroposlib run-api: uvicorn's default 5 s). When both sides wait the same 5 s, a client sends its next request on
a pooled connection just as the server closes it, and the request fails with "Server disconnected without sending
a response": a trainer polling ``/batch`` after a 5 s step failed a run that way."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from env_host_fakes import serve_in_thread, trajectory_api_process

from hermes_nb.inference.engine import InferenceEngine
from hermes_nb.inference.server import InferenceServer
from hermes_nb.model_test.gateway import Gateway
from hermes_nb.system.net import CLIENT_KEEP_ALIVE_S, LOOPBACK, free_port
from hermes_nb.trajectory_api import endpoints
from hermes_nb.trajectory_api.client import SyncTrajectoryClient

# Longer than httpx's idle limit (5 s) and uvicorn's default keep-alive (5 s), which raced each other.
IDLE_S = 6.0
# Past the trajectory clients' own limit, within httpx's default and uvicorn's 5 s: a client with httpx's default
# would reuse the connection here.
CLIENT_IDLE_S = 3.0


def answer_to(sock: socket.socket, path: str) -> bytes:
    """One HTTP/1.1 request on ``sock`` (kept alive) and the status line of its answer; b"" when the server has
    closed the connection."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {LOOPBACK}\r\nConnection: keep-alive\r\n\r\n".encode())
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        if not chunk:
            return b""
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head.split(b"\r\n")[0]


def asked_again_after_silence(port: int, path: str, results: dict[str, bytes], name: str) -> None:
    with socket.create_connection((LOOPBACK, port), timeout=30) as sock:
        first = answer_to(sock, path)
        assert first.startswith(b"HTTP/1.1"), first
        time.sleep(IDLE_S)
        try:
            results[name] = answer_to(sock, path)
        except ConnectionResetError:
            results[name] = b""


@contextmanager
def inference_server() -> Iterator[int]:
    server = InferenceServer(InferenceEngine(), free_port())
    server.start()
    try:
        yield server.port
    finally:
        server.stop()


def test_every_server_answers_on_a_connection_left_idle_longer_than_clients_keep_theirs(tmp_path: Path) -> None:
    results: dict[str, bytes] = {}

    async def with_gateway(ask: Callable[[int], None]) -> None:
        async with Gateway() as gateway:
            await asyncio.to_thread(ask, gateway.port)

    with trajectory_api_process(tmp_path / "api.log") as api_url, inference_server() as inference_port:
        api_port = int(api_url.rsplit(":", 1)[1])
        askers = [
            threading.Thread(target=asked_again_after_silence, args=(api_port, "/health", results, "api")),
            threading.Thread(target=asked_again_after_silence, args=(inference_port, "/health", results, "inference")),
        ]
        for asker in askers:
            asker.start()
        asyncio.run(with_gateway(lambda port: asked_again_after_silence(port, "/m/none/v1/models", results, "gateway")))
        for asker in askers:
            asker.join()

    assert {name: line.split(b" ")[0] for name, line in results.items()} == dict.fromkeys(
        ("api", "inference", "gateway"), b"HTTP/1.1"
    ), results


def test_a_trajectory_client_does_not_reuse_a_connection_idle_for_longer_than_it_keeps_one() -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    client_ports: list[int] = []

    async def status(request: Request) -> JSONResponse:
        assert request.client is not None
        client_ports.append(request.client.port)
        return JSONResponse({"current_step": 0, "queue_size": 0})

    app = Starlette(routes=[Route("/status", status)])
    server = serve_in_thread(app, "a server with uvicorn's own keep-alive, as run-api")
    with server as url, SyncTrajectoryClient(url) as api:
        api.send(endpoints.status())
        api.send(endpoints.status())  # at once: the same connection
        time.sleep(CLIENT_IDLE_S)
        api.send(endpoints.status())

    assert client_ports[0] == client_ports[1] and client_ports[2] != client_ports[1]
    assert CLIENT_KEEP_ALIVE_S < CLIENT_IDLE_S
