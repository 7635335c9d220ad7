"""A real IPython kernel driven through jupyter_client, as a notebook front end drives it: run a cell, read what
it printed, restart the kernel, shut it down."""

from __future__ import annotations

import json
from typing import Any

from jupyter_client.manager import KernelManager

from hermes_nb.notebook.headless.execution import KERNEL_START_TIMEOUT_S, kernel_manager_config

# The first cell imports hermes-nb and loads the extension; on two busy cores that alone can take a minute.
DEFAULT_CELL_TIMEOUT_S = 300.0


class CellError(AssertionError):
    pass


class KernelSession:
    def __init__(self) -> None:
        self.manager = KernelManager(kernel_name="python3", config=kernel_manager_config())
        self.manager.start_kernel()
        self.client = self.manager.blocking_client()
        self._connect()

    def _connect(self) -> None:
        self.client.start_channels()
        self.client.wait_for_ready(timeout=KERNEL_START_TIMEOUT_S)

    @property
    def pid(self) -> int:
        provisioner = self.manager.provisioner
        assert provisioner is not None and provisioner.pid is not None  # type: ignore[attr-defined]
        return int(provisioner.pid)  # type: ignore[attr-defined]

    def run(self, code: str, timeout: float = DEFAULT_CELL_TIMEOUT_S) -> str:
        """Execute one cell; its printed text. A cell that raises fails the caller with the kernel's traceback."""
        printed: list[str] = []
        shown: list[dict[str, Any]] = []

        def output(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream":
                printed.append(msg["content"]["text"])
            elif msg["msg_type"] in ("display_data", "execute_result", "update_display_data"):
                shown.append(msg["content"]["data"])
            elif msg["msg_type"] == "error":
                printed.append("\n".join(msg["content"]["traceback"]))

        reply = self.client.execute_interactive(code, timeout=timeout, output_hook=output)
        if reply["content"]["status"] != "ok":
            raise CellError(f"cell failed:\n{code}\n---\n{''.join(printed)}")
        self.displayed = shown
        return "".join(printed)

    def value(self, expression: str, timeout: float = DEFAULT_CELL_TIMEOUT_S) -> Any:
        """The value of a JSON-serialisable expression evaluated in the kernel."""
        out = self.run(f"import json as _json\nprint(_json.dumps({expression}))", timeout)
        return json.loads(out.strip().splitlines()[-1])

    def restart(self) -> None:
        """Restart the kernel process (what Kernel > Restart does): a new process, nothing of the old one kept."""
        self.client.stop_channels()
        self.manager.restart_kernel(now=True)
        self.client = self.manager.blocking_client()
        self._connect()

    def shutdown(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


# Kernel-side helpers for leak checks (sent into the kernel, which has imported gc, threading, time, footprint and
# leaks): wait for the plot's and monitors' threads to end, then compare the kernel's footprint with ``before``
# until it settles or ``timeout`` passes.
SETTLED_LEAKS = """
def quiet(timeout=30.0):
    # The plot's and the monitors' threads end by themselves within an interval of their run's end.
    deadline = time.monotonic() + timeout
    while any(t.name.startswith(("hermes-nb-live-plot", "hermes-nb-run-monitor")) for t in threading.enumerate()):
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    gc.collect()

def settled_leaks(before, timeout=30.0):
    quiet()
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        found = leaks(before, footprint())
        if found.none or time.monotonic() > deadline:
            return found
        time.sleep(0.5)
"""
