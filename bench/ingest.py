"""Ingest: hermes-nb's trajectory API against atroposlib's ``run-api``, the same payloads, in one run.

Each round posts ``--groups`` scored groups (``--group-size`` sequences of ``--tokens`` tokens, with masks and
sampling logprobs, gzipped as atroposlib environments send them) to ``/scored_data`` from ``--concurrency``
kept-alive connections, while one more connection drains ``/batch`` as a trainer does (polling every 20 ms
while no batch is ready). A round ends when every group has come back out in a batch. Figures per server:
groups/s and MB/s (uncompressed JSON) over the round's wall time, and the server process's CPU seconds per
group (``psutil``: user + system). The two servers run side by side for the whole bench; rounds alternate
between them (ABBA order) so that other load on the machine falls on both, and each round starts from
``/reset_data``. One warm-up round each is not counted.

The client is a minimal HTTP/1.1 client over asyncio streams that sends pre-built bytes: a general client
(httpx) spends more CPU per request than the servers do, on the same two cores, which would blur the servers'
difference. Requests carry the headers real clients send: ``Content-Encoding: gzip`` on bodies (atroposlib's
environments compress JSON of 1 KiB and more) and ``Accept-Encoding: gzip, deflate`` (requests and httpx send
it by default; run-api then gzips its batches, hermes-nb's API never compresses).

Needs the atropos side environment for ``run-api`` (``sh scripts/side_env.sh atropos``; ``make test`` builds it).

    .venv/bin/python bench/ingest.py [--groups 1000] [--rounds 3] [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
RUN_API = ROOT / ".venvs" / "atropos" / "bin" / "run-api"
HOST = "127.0.0.1"
# A trainer's poll interval while no batch is ready (hermes_nb.trajectory_api.client.BATCH_POLL_S).
DRAIN_POLL_S = 0.02
# Sequences per batch = GROUPS_PER_BATCH whole groups: 8 x 16 = 128, BaseEnvConfig's default batch_size, and
# 1,000 groups are 125 whole batches.
GROUPS_PER_BATCH = 8
# Distinct payloads, cycled: enough that no server can profit from seeing the same bytes twice in a row.
DISTINCT_PAYLOADS = 64
PROMPT_TOKENS = 32
# What atroposlib (and hermes-nb) put in inference_logprobs at prompt positions.
PROMPT_LOGPROB = 1.0
MASK_IGNORE = -100
START_TIMEOUT_S = 120.0
# Anything shorter than this is `{"batch": null}`, not a batch (which is hundreds of kB).
EMPTY_BATCH_MAX_BYTES = 64


# ---- payloads -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Payload:
    body: bytes  # gzip of the JSON
    json_bytes: int


def group_json(rng: random.Random, group_size: int, tokens: int) -> dict[str, object]:
    """One group as atroposlib's ``handle_send_to_api`` posts it (its defaults filled, ``env_id`` 0)."""
    prompt = [rng.randrange(32_000) for _ in range(PROMPT_TOKENS)]
    completion_len = tokens - PROMPT_TOKENS
    tokens_G, masks_G, logprobs_G = [], [], []
    for _ in range(group_size):
        completion = [rng.randrange(32_000) for _ in range(completion_len)]
        tokens_G.append(prompt + completion)
        masks_G.append([MASK_IGNORE] * PROMPT_TOKENS + completion)
        # float32 logprobs turned into Python floats, as a sampler returns them: full-length reprs.
        logprobs_G.append([PROMPT_LOGPROB] * PROMPT_TOKENS + [-rng.expovariate(2.0) for _ in range(completion_len)])
    scores_G = [float(i % 2) for i in range(group_size)]
    return {
        "tokens": tokens_G,
        "masks": masks_G,
        "scores": scores_G,
        "advantages": None,
        "ref_logprobs": None,
        "messages": None,
        "inference_logprobs": logprobs_G,
        "overrides": None,
        "group_overrides": None,
        "distill_token_ids": None,
        "distill_logprobs": None,
        "env_id": 0,
    }


def make_payloads(group_size: int, tokens: int, seed: int = 0) -> list[Payload]:
    rng = random.Random(seed)
    payloads = []
    for _ in range(DISTINCT_PAYLOADS):
        raw = json.dumps(group_json(rng, group_size, tokens)).encode()  # atroposlib: json.dumps, default separators
        payloads.append(Payload(body=gzip.compress(raw), json_bytes=len(raw)))
    return payloads


# ---- a lean HTTP/1.1 client -----------------------------------------------------------------------------------
class Connection:
    """One kept-alive connection; ``request`` sends pre-built bytes and returns (status, body)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection(HOST, port, limit=2**20)
        return cls(reader, writer)

    async def request(self, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
        self.writer.write(head + body)
        status = int((await self.reader.readline()).split()[1])
        length, chunked = 0, False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
        if chunked:
            return status, await self._chunked_body()
        return status, await self.reader.readexactly(length)

    async def _chunked_body(self) -> bytes:
        parts = []
        while size := int((await self.reader.readline()).split(b";")[0], 16):
            parts.append(await self.reader.readexactly(size))
            await self.reader.readline()
        await self.reader.readline()
        return b"".join(parts)

    def close(self) -> None:
        self.writer.close()


# What requests and httpx send unless told otherwise; ``--accept-encoding ''`` leaves the header out.
ACCEPT_ENCODING = {"value": "gzip, deflate"}


def head(method: str, path: str, port: int, length: int = 0, gzipped: bool = False) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {HOST}:{port}",
        "Content-Type: application/json",
        f"Content-Length: {length}",
    ]
    if ACCEPT_ENCODING["value"]:
        lines.append(f"Accept-Encoding: {ACCEPT_ENCODING['value']}")
    if gzipped:
        lines.append("Content-Encoding: gzip")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def call(conn: Connection, port: int, method: str, path: str, payload: object | None = None) -> bytes:
    body = json.dumps(payload).encode() if payload is not None else b""
    status, answer = await conn.request(head(method, path, port, len(body)), body)
    if status != 200:
        raise RuntimeError(f"{method} {path} -> {status}: {answer[:300]!r}")
    return answer


# ---- one round ------------------------------------------------------------------------------------------------
@dataclass
class Server:
    name: str
    argv: list[str]
    port: int
    proc: subprocess.Popen[bytes] | None = None
    rounds: list[Round] = field(default_factory=list)

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        times = psutil.Process(self.proc.pid).cpu_times()
        return times.user + times.system


@dataclass(frozen=True)
class Round:
    groups: int
    seconds: float
    cpu_seconds: float
    json_bytes: int

    @property
    def groups_per_s(self) -> float:
        return self.groups / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.json_bytes / self.seconds / 1e6

    @property
    def cpu_ms_per_group(self) -> float:
        return self.cpu_seconds / self.groups * 1000


async def prepare(server: Server, group_size: int, tokens: int) -> None:
    """Reset, register a trainer and an environment (run-api lets environments in only after a first /batch)."""
    conn = await Connection.open(server.port)
    try:
        await call(conn, server.port, "GET", "/reset_data")
        registration = {
            "wandb_group": "bench",
            "wandb_project": "bench",
            "batch_size": GROUPS_PER_BATCH * group_size,
            "max_token_len": 4 * tokens,
            "checkpoint_dir": "",
            "save_checkpoint_interval": 0,
            "starting_step": 0,
            "num_steps": 1_000_000,
        }
        await call(conn, server.port, "POST", "/register", registration)
        await call(conn, server.port, "GET", "/batch")
        env = {"max_token_length": 4 * tokens, "desired_name": "bench", "weight": 1.0, "group_size": group_size}
        answer = json.loads(await call(conn, server.port, "POST", "/register-env", env))
        if answer.get("env_id") != 0:
            raise RuntimeError(f"{server.name}: /register-env answered {answer}")
    finally:
        conn.close()


async def post_all(port: int, payloads: list[Payload], todo: Iterator[int]) -> None:
    conn = await Connection.open(port)
    try:
        for index in todo:
            payload = payloads[index % len(payloads)]
            status, answer = await conn.request(
                head("POST", "/scored_data", port, len(payload.body), True), payload.body
            )
            if status != 200:
                raise RuntimeError(f"POST /scored_data -> {status}: {answer[:300]!r}")
    finally:
        conn.close()


async def drain(port: int, groups: int) -> None:
    conn = await Connection.open(port)
    request = head("GET", "/batch", port)
    drained = 0
    try:
        while drained < groups:
            status, answer = await conn.request(request)
            if status != 200:
                raise RuntimeError(f"GET /batch -> {status}: {answer[:300]!r}")
            if len(answer) <= EMPTY_BATCH_MAX_BYTES:
                await asyncio.sleep(DRAIN_POLL_S)
                continue
            drained += GROUPS_PER_BATCH
    finally:
        conn.close()


async def one_round(server: Server, payloads: list[Payload], groups: int, concurrency: int, group_size: int) -> Round:
    tokens = len(json.loads(gzip.decompress(payloads[0].body))["tokens"][0])
    await prepare(server, group_size, tokens)
    todo = iter(range(groups))  # shared: each poster takes the next group
    cpu_before, started = server.cpu_seconds(), time.perf_counter()
    await asyncio.gather(
        drain(server.port, groups), *(post_all(server.port, payloads, todo) for _ in range(concurrency))
    )
    seconds, cpu = time.perf_counter() - started, server.cpu_seconds() - cpu_before
    await check_empty(server)
    json_bytes = sum(payloads[i % len(payloads)].json_bytes for i in range(groups))
    return Round(groups=groups, seconds=seconds, cpu_seconds=cpu, json_bytes=json_bytes)


async def check_empty(server: Server) -> None:
    """Every posted group was served in a batch: nothing is left queued."""
    conn = await Connection.open(server.port)
    try:
        status = json.loads(await call(conn, server.port, "GET", "/status"))
    finally:
        conn.close()
    if status["queue_size"] != 0:
        raise RuntimeError(f"{server.name}: {status['queue_size']} groups still queued after the round")


# ---- servers --------------------------------------------------------------------------------------------------
def free_port() -> int:
    from hermes_nb.system.net import free_port as pick

    return pick()


def servers() -> list[Server]:
    if not RUN_API.is_file():
        raise SystemExit(f"{RUN_API} not found: build the atropos side environment (sh scripts/side_env.sh atropos)")
    hermes_port, atropos_port = free_port(), free_port()
    hermes = [sys.executable, "-m", "hermes_nb.trajectory_api", "--host", HOST, "--port", str(hermes_port)]
    return [
        Server("hermes-nb API", hermes, hermes_port),
        Server("atroposlib run-api", [str(RUN_API), "--host", HOST, "--port", str(atropos_port)], atropos_port),
    ]


@contextmanager
def running(all_servers: list[Server], log_dir: Path) -> Iterator[None]:
    try:
        for server in all_servers:
            log = (log_dir / f"{server.port}.log").open("wb")
            server.proc = subprocess.Popen(server.argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        for server in all_servers:
            wait_for_status(server, log_dir / f"{server.port}.log")
        yield
    finally:
        for server in all_servers:
            if server.proc is not None:
                server.proc.terminate()
                try:
                    server.proc.wait(10)
                except subprocess.TimeoutExpired:
                    server.proc.kill()
                    server.proc.wait()


def wait_for_status(server: Server, log: Path) -> None:
    import httpx

    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert server.proc is not None
        if server.proc.poll() is not None:
            raise SystemExit(f"{server.name} exited {server.proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://{HOST}:{server.port}/status", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"{server.name} did not answer /status within {START_TIMEOUT_S:.0f} s")


def server_stack(python: str) -> str:
    """Which event loop and HTTP parser uvicorn picks in that interpreter (its 'auto' choice)."""
    code = (
        "import importlib.util as u, uvicorn; "
        "print('uvicorn', uvicorn.__version__, 'uvloop' if u.find_spec('uvloop') else 'asyncio', "
        "'httptools' if u.find_spec('httptools') else 'h11')"
    )
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


# ---- report ---------------------------------------------------------------------------------------------------
def summary_lines(args: argparse.Namespace, all_servers: list[Server], payloads: list[Payload]) -> list[str]:
    json_kb = statistics.mean(p.json_bytes for p in payloads) / 1000
    gzip_kb = statistics.mean(len(p.body) for p in payloads) / 1000
    lines = [
        f"{args.groups} groups of {args.group_size} x {args.tokens} tokens (+ masks, inference logprobs): "
        f"{json_kb:.1f} kB JSON, {gzip_kb:.1f} kB gzipped, per group; {args.concurrency} posting connections "
        f"+ 1 /batch drain ({GROUPS_PER_BATCH * args.group_size} sequences per batch); {args.rounds} rounds each, "
        "ABBA order",
        f"{'server':<20} {'groups/s':>9} {'MB/s':>7} {'CPU ms/group':>13}   groups/s of each round",
    ]
    for server in all_servers:
        gps = statistics.median(r.groups_per_s for r in server.rounds)
        mbs = statistics.median(r.mb_per_s for r in server.rounds)
        cpu = statistics.median(r.cpu_ms_per_group for r in server.rounds)
        each = ", ".join(f"{r.groups_per_s:.0f}" for r in server.rounds)
        lines.append(f"{server.name:<20} {gps:>9.0f} {mbs:>7.1f} {cpu:>13.2f}   {each}")
    ours, theirs = all_servers
    speed = statistics.median(r.groups_per_s for r in ours.rounds) / statistics.median(
        r.groups_per_s for r in theirs.rounds
    )
    cpu_ratio = statistics.median(r.cpu_ms_per_group for r in ours.rounds) / statistics.median(
        r.cpu_ms_per_group for r in theirs.rounds
    )
    lines.append(f"hermes-nb / run-api: {speed:.2f}x groups/s, {cpu_ratio:.2f}x CPU per group (target >= 2x, <= 0.5x)")
    lines.append(
        f"stacks: hermes-nb {server_stack(sys.executable)}; run-api {server_stack(str(RUN_API.parent / 'python'))}"
    )
    lines.append(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return lines


INTRO = (
    "`bench/ingest.py`: the same scored groups posted to hermes-nb's trajectory API and to atroposlib's `run-api`\n"
    "(atroposlib 0.4.0, from the atropos side environment), with a concurrent `/batch` drain, rounds alternating\n"
    "between the two in one run. Server CPU is the server process's user + system time. Target (issue 13):\n"
    "hermes-nb >= 2x run-api in groups/s and <= 0.5x its CPU per group on this two-core machine.\n"
)


async def bench(args: argparse.Namespace, all_servers: list[Server], payloads: list[Payload]) -> None:
    for server in all_servers:  # warm-up, not counted
        await one_round(server, payloads, min(args.groups, 160), args.concurrency, args.group_size)
    for index in range(args.rounds):
        order = all_servers if index % 2 == 0 else all_servers[::-1]
        for server in order:
            result = await one_round(server, payloads, args.groups, args.concurrency, args.group_size)
            server.rounds.append(result)
            print(
                f"round {index + 1} {server.name}: {result.groups_per_s:.0f} groups/s, "
                f"{result.cpu_ms_per_group:.2f} ms CPU/group",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--accept-encoding", default=ACCEPT_ENCODING["value"], help="the clients' Accept-Encoding ('' = none)"
    )
    parser.add_argument("--write", action="store_true", help="append the figures to docs/benchmarks.md")
    args = parser.parse_args()
    ACCEPT_ENCODING["value"] = args.accept_encoding
    if args.groups % GROUPS_PER_BATCH:
        parser.error(f"--groups must be a multiple of {GROUPS_PER_BATCH} (whole batches)")
    payloads = make_payloads(args.group_size, args.tokens)
    all_servers = servers()
    with tempfile.TemporaryDirectory() as tmp, running(all_servers, Path(tmp)):
        asyncio.run(bench(args, all_servers, payloads))
    lines = summary_lines(args, all_servers, payloads)
    print("\n".join(lines))
    if args.write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from report import append_run, run_block

        command = "python bench/ingest.py " + " ".join(sys.argv[1:])
        append_run("## Ingest: trajectory API against run-api", INTRO, run_block(f"`{command.strip()}`", lines))


if __name__ == "__main__":
    main()
