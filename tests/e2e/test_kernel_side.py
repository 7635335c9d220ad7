"""The kernel's side of a run, in a real IPython kernel driven through jupyter_client: a restart mid-run finds
the run again, and starting and stopping runs leaves nothing behind in the kernel."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kernel_session import SETTLED_LEAKS, KernelSession
from run_helpers import wait_for_status

from hermes_nb.protocol.run_state import RunState
from hermes_nb.runs.launcher import new_run_id
from hermes_nb.runs.supervision.state_file import write_run_state
from hermes_nb.system import home

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.usefixtures("quick_env")]

START_TIMEOUT = 180.0
PROGRESS_TIMEOUT = 120.0
# Five measured after the baseline: a leak per cycle shows after one; bench/cycles.py runs a hundred.
CYCLES = 6
LONG_RUN = "total_steps=500"

# In the kernel: the extension, and a wait that polls the core as a user's loop would (quick_env has selected
# the environment and loaded configs/quick_test.yaml into the home the kernel shares).
SETUP = """
%load_ext hermes_nb
import gc, threading, time
from hermes_nb import run_sync
from hermes_nb.api import rl_check_status

def wait_until(done, timeout, what):
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.2)
"""


@pytest.fixture
def kernel() -> Iterator[KernelSession]:
    session = KernelSession()
    try:
        session.run(SETUP)
        yield session
    finally:
        session.shutdown()


def ended_newer_run() -> str:
    """A run newer than the live one that has already ended (as one from the CLI or another kernel would)."""
    run_id = new_run_id()
    home.run_dir(run_id).mkdir(parents=True)
    state = RunState(run_id=run_id, environment="arithmetic", status="stopped", total_steps=10, ended_at=time.time())
    write_run_state(home.run_dir(run_id), state)
    return run_id


@pytest.mark.timeout(600)
def test_after_a_kernel_restart_rl_watch_and_the_dashboard_follow_the_running_run(kernel: KernelSession) -> None:
    run_id = kernel.value(f"get_ipython().run_line_magic('rl_start', '{LONG_RUN}').run_id")
    wait_for_status(run_id, lambda s: s.step >= 1, START_TIMEOUT)
    newer = ended_newer_run()
    old_pid = kernel.pid

    kernel.restart()
    kernel.run(SETUP)

    assert kernel.pid != old_pid
    assert kernel.value("get_ipython().run_line_magic('rl_status', '').run_id") == run_id
    kernel.run("_plot = get_ipython().run_line_magic('rl_watch', '')\ndisplay(_plot)")
    assert kernel.value("_plot.plot.sources[0].label") == run_id != newer
    first = kernel.value("_plot.plot.latest_step() or 0")
    kernel.run(f"wait_until(lambda: (_plot.plot.latest_step() or 0) > {first}, {PROGRESS_TIMEOUT}, 'plot')")
    assert kernel.value("_plot.running")  # its thread redraws while the run goes on

    kernel.run("import hermes_nb\n_dash = hermes_nb.dashboard()\ndisplay(_dash)")
    assert kernel.value("[_dash.monitor.run_id, _dash.plot.plot.sources[0].label]") == [run_id, run_id]
    seen = kernel.value("_dash.monitor.last_status.step")
    kernel.run(f"wait_until(lambda: _dash.monitor.last_status.step > {seen}, {PROGRESS_TIMEOUT}, 'monitor')")
    assert kernel.value("[_dash.monitor.refreshing, _dash.monitor.last_status.status]") == [True, "running"]


# In the kernel: one start/stop cycle as a user makes it, alternately with the magics (a live plot and a run
# monitor shown for each run) and with the dashboard's Start and Stop buttons.
CYCLE = (
    f"""
import json
import hermes_nb
from hermes_nb.notebook.widgets.monitor import RunMonitor
from hermes_nb.system.footprint import footprint, leaks

_dash = hermes_nb.dashboard()
display(_dash)

def status_of(run_id):
    return run_sync(rl_check_status(run_id))

def cycle(i):
    if i % 2:
        run_id = _dash.monitor.start().run_id
    else:
        run_id = get_ipython().run_line_magic("rl_start", "{LONG_RUN}").run_id
        display(get_ipython().run_line_magic("rl_watch", ""))
        display(RunMonitor())
    wait_until(lambda: status_of(run_id).status != "starting", {START_TIMEOUT}, "start")
    assert status_of(run_id).status == "running", status_of(run_id)
    get_ipython().run_line_magic("rl_status", "")
    if i % 2:
        _dash.monitor.stop()  # returns at once, as the button does
        wait_until(lambda: status_of(run_id).is_terminal, 300, "stop")
    else:
        get_ipython().run_line_magic("rl_stop", "")
    assert status_of(run_id).status == "stopped"

"""
    + SETTLED_LEAKS
)


@pytest.mark.timeout(1500)  # ~40 s a cycle on two busy cores
def test_start_stop_cycles_leave_no_thread_fd_child_or_port_in_the_kernel(kernel: KernelSession) -> None:
    kernel.run(CYCLE)
    # The first cycle loads what stays loaded (matplotlib's fonts, asyncio's worker pool): the baseline is after.
    kernel.run("cycle(0)\nquiet()\n_before = footprint()")
    started = time.monotonic()

    for i in range(1, CYCLES):
        kernel.run(f"cycle({i})")

    per_cycle = (time.monotonic() - started) / (CYCLES - 1)
    found = kernel.value("settled_leaks(_before).model_dump()")
    print(f"{per_cycle:.1f} s per cycle; RSS {found['rss_growth_bytes'] / 2**20:+.1f} MiB over {CYCLES - 1} cycles")
    # Fewer OS threads or fds than before is no leak (a thread of the baseline may end meanwhile).
    assert found["threads"] == [] and found["os_threads"] <= 0 and found["fds"] <= 0, found
    assert (found["children"], found["listening_ports"]) == ([], []), found
