"""``python -m hermes_nb.trajectory_api --host 127.0.0.1 --port N``: serve the trajectory API until SIGTERM.

Log lines go to stderr (the run supervisor sends them to ``logs/api_<run_id>.log``). SIGTERM and Ctrl-C stop
the server gracefully and the process exits 0.
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
from types import FrameType

import uvicorn
from pydantic import ValidationError

from hermes_nb.system.net import LOOPBACK, SERVER_KEEP_ALIVE_S
from hermes_nb.trajectory_api.server import DEFAULT_PORT, ApiSettings, create_app
from hermes_nb.trajectory_api.state import MIB, ApiLimits

log = logging.getLogger("hermes_nb.trajectory_api")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _parser() -> argparse.ArgumentParser:
    defaults = ApiLimits()
    parser = argparse.ArgumentParser(prog="python -m hermes_nb.trajectory_api", description=__doc__)
    parser.add_argument("--host", default=LOOPBACK, help="address to bind, and only this one (default %(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port; 0 picks a free one (default %(default)s)")
    parser.add_argument("--max-body-mb", type=float, default=defaults.max_body_bytes / MIB)
    parser.add_argument("--max-group-size", type=int, default=defaults.max_group_size)
    parser.add_argument("--max-queued-tokens", type=int, default=defaults.max_queued_tokens)
    parser.add_argument(
        "--max-queued-sequences",
        type=int,
        default=defaults.max_queued_sequences,
        help="cap on queued + buffered sequences; posts beyond it get 503 + Retry-After (default: no cap)",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--access-log", action="store_true", help="log every request (noisy)")
    return parser


def _bind(host: str, port: int) -> socket.socket:
    """Bind before serving, so a failure is one clear line and the log names the port really bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio turns on TCP_NODELAY only for sockets that say so, and without it every
    # kept-alive response waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    # uvicorn shuts down gracefully on SIGTERM and then re-raises the signal; this makes that exit 0.
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT, stream=sys.stderr)
    try:
        settings = _settings(args)
    except ValidationError as exc:
        first = exc.errors()[0]
        log.error("invalid option %s: %s", ".".join(str(p) for p in first["loc"]), first["msg"])
        return 2
    try:
        sock = _bind(settings.host, settings.port)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", settings.host, settings.port, exc)
        return 1
    return _serve(settings, sock)


def _settings(args: argparse.Namespace) -> ApiSettings:
    limits = ApiLimits(
        max_body_bytes=int(args.max_body_mb * MIB),
        max_group_size=args.max_group_size,
        max_queued_tokens=args.max_queued_tokens,
        max_queued_sequences=args.max_queued_sequences,
    )
    return ApiSettings(
        host=args.host, port=args.port, limits=limits, access_log=args.access_log, log_level=args.log_level
    )


def _serve(settings: ApiSettings, sock: socket.socket) -> int:
    config = uvicorn.Config(
        create_app(settings),
        log_config=None,  # keep our logging set-up
        # uvicorn's own start-up chatter is noise next to our one "listening" line.
        log_level=logging.DEBUG if settings.log_level == "debug" else logging.WARNING,
        access_log=settings.access_log,
        lifespan="off",
        timeout_keep_alive=SERVER_KEEP_ALIVE_S,
    )
    if settings.access_log:
        logging.getLogger("uvicorn.access").setLevel(logging.INFO)
    signal.signal(signal.SIGTERM, _exit_cleanly)
    host, port = sock.getsockname()[:2]
    log.info("trajectory API listening on http://%s:%d", host, port)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        log.info("trajectory API stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
