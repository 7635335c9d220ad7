"""Evidence for ``run_sync``: a background loop thread vs nest-asyncio2, measured inside a real IPython kernel.

    .venv/bin/python bench/sync_access.py

For each strategy (``thread_run``: private loop in a daemon thread; ``nest_run``: nest-asyncio2 on the kernel's
loop; ``final_run``: ``hermes_nb.run_sync``) it runs, from synchronous cell code: a core-like coroutine
(subprocess + to_thread), a wait on an ``asyncio.Event`` bound to the kernel loop, a kernel-loop background task
(does it tick during the call?), a nested call, the per-call overhead, the order of two cells sent back to back,
and an ``await`` cell afterwards. Results are in docs/architecture.md, "Sync access".
"""

import json
import time
from pathlib import Path
from typing import Any

from jupyter_client.manager import start_new_kernel

SETUP = r"""
REPO_ROOT = %r
import asyncio, sys, time, threading
sys.path.insert(0, REPO_ROOT)
from hermes_nb.syncio import run_sync as final_run, _run_on_private_loop as thread_run
import nest_asyncio2
def nest_run(coro):
    nest_asyncio2.apply()
    return asyncio.get_event_loop().run_until_complete(coro)
async def work(x):
    await asyncio.sleep(0.01)
    p = await asyncio.create_subprocess_exec(sys.executable, "-c", "print(41)", stdout=asyncio.subprocess.PIPE)
    out, _ = await p.communicate()
    return int(out) + await asyncio.to_thread(lambda: x)
log = []
"""

CASES = {
    "basic": "print(RUN(work(1)))",
    "kernel_loop_object": """
ev = asyncio.Event()
asyncio.get_running_loop().call_later(0.05, ev.set)
try:
    print(RUN(asyncio.wait_for(ev.wait(), 2)))
except Exception as e:
    print("ERR", type(e).__name__, e)
""",
    "start_background_task": """
ticks = []
async def ticker():
    while True:
        ticks.append(1)
        await asyncio.sleep(0.01)
t = asyncio.get_running_loop().create_task(ticker())
""",
    "background_task_progress": "n0 = len(ticks)\nRUN(asyncio.sleep(0.5))\nprint('ticks', len(ticks) - n0)\nt.cancel()",
    "reentrant": """
async def outer():
    return RUN(work(2))
print(RUN(outer()))
""",
    "timing": """
t0 = time.perf_counter()
for _ in range(200):
    RUN(asyncio.sleep(0))
print("per call us", (time.perf_counter() - t0) / 200 * 1e6)
""",
    "await_cell": "await asyncio.sleep(0.01)\nprint('await ok')",
}
# A thread-only runner called from its own loop waits on itself forever: not run, recorded.
SKIP = {("thread_run", "reentrant"): "deadlock"}


def execute(kc: Any, code: str) -> str:
    lines: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] in ("stream", "error"):
            lines.append(msg["content"].get("text") or msg["content"].get("evalue") or "")

    kc.execute_interactive(code, timeout=60, output_hook=hook)
    return "".join(lines).strip()


def cell_order(kc: Any, kind: str) -> str:
    """Two cells sent back to back, the first blocked in a sync call for 1 s: do they run in order?"""
    kc.execute(f"log.append('A start'); {kind}(asyncio.sleep(1)); log.append('A end')")
    kc.execute("log.append('B')")
    time.sleep(3)
    return execute(kc, "print(log)")


def run(kind: str) -> dict[str, str]:
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        execute(kc, SETUP % str(Path(__file__).resolve().parent.parent))
        out = {name: SKIP.get((kind, name)) or execute(kc, code.replace("RUN", kind)) for name, code in CASES.items()}
        out["cell_order"] = cell_order(kc, kind)
        return out
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


if __name__ == "__main__":
    for kind in ("thread_run", "nest_run", "final_run"):
        print(kind, json.dumps(run(kind), indent=1))
