"""The least CPU an OpenEnv episode can cost: a one-step episode (``reset``, then one ``step``) over a session
with nothing else around it, on the server of ``bench/environments/addition_openenv.py`` (the task of
``bench/env_overhead.py``'s OpenEnv row).

    PYTHONPATH=. .venvs/openenv/bin/python bench/openenv_floor.py [--rounds 3] [--episodes 4000] [--sessions 8]

Run in the OpenEnv side environment (``sh scripts/side_env.sh openenv``). The server is started as a run starts it
(``frameworks.openenv.server.start_server``: OpenEnv's ``create_app`` under uvicorn, in its own process); the
client is hermes-nb's ``OpenEnvSession``, ``--sessions`` of them playing at once, each reused from episode to
episode as a run reuses its sessions. Per round, alternating, the client offers permessage-deflate (websockets'
default) and does not (what a run does on loopback). The figures are CPU milliseconds per episode of the server
process and of this one (read from ``/proc``; the client does nothing but the episodes), and the same times 8:
per group of ``env_overhead``'s runs. Native's whole environment costs ~2-3 ms a group there, so this says how
close any OpenEnv adapter can come.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from hermes_nb.frameworks.openenv.server import start_server
from hermes_nb.frameworks.openenv.session import OpenEnvSession

ENVIRONMENT_FILE = Path(__file__).resolve().parent / "environments" / "addition_openenv.py"
GROUP_SIZE = 8  # env_overhead's env.group_size
WARMUP_EPISODES = 20  # per session, before the measured ones
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` (``/proc/PID/stat``'s utime and stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


async def play(session: OpenEnvSession, episodes: int) -> None:
    for seed in range(episodes):
        await session.reset(seed=seed)
        await session.step({"message": "42"})


async def measure(url: str, server_pid: int, *, compress: bool, episodes: int, sessions: int) -> dict[str, float]:
    opened = [await OpenEnvSession(url, compress=compress).__aenter__() for _ in range(sessions)]
    try:
        await asyncio.gather(*(play(s, WARMUP_EPISODES) for s in opened))
        server_before, client_before, started = process_cpu_s(server_pid), own_cpu_s(), time.perf_counter()
        await asyncio.gather(*(play(s, episodes // sessions) for s in opened))
        server_ms = 1000 * (process_cpu_s(server_pid) - server_before) / episodes
        client_ms = 1000 * (own_cpu_s() - client_before) / episodes
        wall_s = time.perf_counter() - started
    finally:
        for session in opened:
            await session.close()
    return {"server_ms": server_ms, "client_ms": client_ms, "wall_s": wall_s}


async def main(rounds: int, episodes: int, sessions: int) -> None:
    with tempfile.TemporaryDirectory(prefix="openenv-floor-") as folder:
        server = await start_server(str(ENVIRONMENT_FILE), Path(folder) / "server.log")
        try:
            pid = server.process.pid
            results: dict[str, list[dict[str, float]]] = {"deflate": [], "plain": []}
            print(f"load before {os.getloadavg()[0]:.2f}; {episodes} episodes a round over {sessions} sessions")
            for round_ in range(rounds):
                for name, compress in (("deflate", True), ("plain", False)):
                    got = await measure(server.url, pid, compress=compress, episodes=episodes, sessions=sessions)
                    results[name].append(got)
                    print(
                        f"round {round_} {name:<8} server {got['server_ms']:.3f} ms/episode  client "
                        f"{got['client_ms']:.3f} ms/episode  ({got['wall_s']:.2f} s)",
                        flush=True,
                    )
            print(f"load after {os.getloadavg()[0]:.2f}; medians, and per group of {GROUP_SIZE}:")
            for name, rows in results.items():
                server_ms = statistics.median(r["server_ms"] for r in rows)
                client_ms = statistics.median(r["client_ms"] for r in rows)
                print(
                    f"{name:<8} server {server_ms:.3f} + client {client_ms:.3f} ms/episode = "
                    f"{GROUP_SIZE * server_ms:.2f} + {GROUP_SIZE * client_ms:.2f} ms/group"
                )
        finally:
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=4000, help="measured episodes per round and client kind")
    parser.add_argument("--sessions", type=int, default=8, help="sessions playing at once")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.episodes, args.sessions))
