"""What a kernel's warm kits hold while they wait: the memory of each kit's four processes (the kit, its warm API,
trainer and environment process) once imported, as proportional set size (a page shared by N processes counts 1/N
to each) and private memory, for a kernel holding one kit and one holding two (``HERMES_NB_WARM_KITS``), each in a
fresh home: the environment selected, and every kit waited for.

    .venv/bin/python bench/kit_memory.py
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
import time
from pathlib import Path

import psutil

ROLES = ("kit", "api", "trainer", "env")
READY_TIMEOUT_S = 120.0


def ready_kits(log_path: str, count: int) -> list[dict[str, int]]:
    """By kit, the pid of each of its processes, once ``count`` kits have said they are ready."""
    from hermes_nb.runs.supervision.warm_kit import READY_LINE

    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        text = Path(log_path).read_text(encoding="utf-8") if os.path.isfile(log_path) else ""
        lines = [line for line in text.splitlines() if line.startswith(READY_LINE)]
        if len(lines) >= count:
            return [dict(zip(ROLES, map(int, re.findall(r"\d+", line)), strict=True)) for line in lines[:count]]
        time.sleep(0.2)
    raise RuntimeError(f"{count} warm kits were not ready within {READY_TIMEOUT_S:.0f} s (log: {log_path})")


def memory_mib(pid: int) -> tuple[float, float]:
    """(proportional set size, private memory) of one process, in MiB."""
    full = psutil.Process(pid).memory_full_info()
    return full.pss / 2**20, full.uss / 2**20


def one_kernel(kits: int) -> list[str]:
    from hermes_nb.api import rl_select_environment
    from hermes_nb.runs.supervision import warm_start

    with tempfile.TemporaryDirectory() as home:
        os.environ["HERMES_NB_HOME"] = home
        os.environ[warm_start.KITS_VAR] = str(kits)
        asyncio.run(rl_select_environment("arithmetic"))
        found = ready_kits(os.path.join(home, "logs", "warm_kit.log"), kits)
        lines, total_pss, total_private = [], 0.0, 0.0
        for number, pids in enumerate(found, start=1):
            sizes = {role: memory_mib(pid) for role, pid in pids.items()}
            pss, private = sum(s[0] for s in sizes.values()), sum(s[1] for s in sizes.values())
            total_pss, total_private = total_pss + pss, total_private + private
            parts = ", ".join(f"{role} {s[0]:.0f}" for role, s in sizes.items())
            lines.append(f"  kit {number}: {pss:.0f} MiB proportional ({parts}), {private:.0f} MiB private")
        warm_start.discard()
    lines.insert(0, f"{kits} kit(s) held: {total_pss:.0f} MiB proportional, {total_private:.0f} MiB private")
    return lines


def main() -> None:
    for kits in (1, 2):
        print("\n".join(one_kernel(kits)), flush=True)


if __name__ == "__main__":
    main()
