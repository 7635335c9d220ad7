"""A live run is private to the user who started it: its secret travels only in environments and 0600 files,
its folders are 0700, the URLs status hands out work with unmodified clients, and another OS user can neither
read the run nor get anything but 401 from its servers.

The run's home sits in a world-traversable folder (as ``~/.hermes/rl`` does under a default umask), so that only
hermes-nb's own modes keep the other user out; pytest's own temporary folders are 0700 and would hide a bug.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import openai
import psutil
import pytest
from ci import skip_or_fail
from run_helpers import QUICK_TEST_CONFIG, run, run_pids, wait_for_status

from hermes_nb.api import rl_check_status, rl_load_config, rl_select_environment, rl_start_training, rl_stop_training
from hermes_nb.protocol.auth import API_SECRET_ENV, SECRET_ENV
from hermes_nb.protocol.run_files import RUN_SECRET_FILE
from hermes_nb.runs.table.results import RunStatus
from hermes_nb.system import home
from hermes_nb.system.secrets import read_run_secret
from hermes_nb.trajectory_api.client import SyncTrajectoryClient

pytestmark = [pytest.mark.e2e]

START_TIMEOUT = 180.0
LONG_RUN = {"total_steps": 500}
PROBE_USER = "hermesnbprobe"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def live_home() -> Iterator[tuple[Path, str]]:
    """A running run in a home under a 0755 folder; its home and run id. Stopped (and removed) at the end."""
    shared = Path(tempfile.mkdtemp(prefix="hermes-nb-shared-"))
    os.chmod(shared, 0o755)
    with pytest.MonkeyPatch.context() as env:
        env.setenv(home.HOME_ENV_VAR, str(shared / "home"))
        run(rl_select_environment("arithmetic"))
        run(rl_load_config(QUICK_TEST_CONFIG))
        start = run(rl_start_training(**LONG_RUN))
        try:
            wait_for_status(start.run_id, lambda s: s.status == "running", START_TIMEOUT)
            yield shared / "home", start.run_id
        finally:
            run(rl_stop_training(start.run_id))
    shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture
def live(live_home: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """The live run's id, with this test reading its home."""
    monkeypatch.setenv(home.HOME_ENV_VAR, str(live_home[0]))
    return live_home[1]


def _run_processes(run_id: str) -> list[psutil.Process]:
    found = []
    for pid in run_pids(run_id).values():
        with_children = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        found += [p for p in with_children if p.is_running()]
    return found


def test_no_run_process_has_the_secret_in_its_argv_and_its_servers_get_it_from_the_environment(live: str) -> None:
    secret = read_run_secret(home.run_dir(live))
    assert secret
    listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout

    processes = _run_processes(live)

    assert len(processes) >= 4  # supervisor, api, trainer, env
    assert secret not in listing
    for proc in processes:
        assert secret not in " ".join(proc.cmdline())
    children = [p for p in processes if "hermes_nb.runs.supervision.supervisor" not in " ".join(p.cmdline())]
    assert all(p.environ().get(SECRET_ENV) == secret for p in children)
    assert all(p.environ().get(API_SECRET_ENV) == secret for p in children)


def test_the_runs_home_folders_secret_and_logs_are_private(live: str) -> None:
    run_dir = home.run_dir(live)
    status = run(rl_check_status(live))

    for folder in (home.home_dir(), home.runs_dir(), home.logs_dir(), run_dir):
        assert _mode(folder) == 0o700, folder
    assert _mode(run_dir / RUN_SECRET_FILE) == 0o600
    for log in status.logs.values():
        if Path(log).exists():
            assert _mode(Path(log)) == 0o600, log


def test_status_hands_out_urls_that_work_with_the_openai_sdk_and_the_trajectory_client(live: str) -> None:
    status: RunStatus = run(rl_check_status(live))
    assert status.inference_url and status.api_url

    client = openai.OpenAI(base_url=status.inference_url, api_key="-", max_retries=0)
    answer = client.completions.create(model="policy", prompt="2 + 2 =", max_tokens=4, temperature=0.0)
    with SyncTrajectoryClient(status.api_url) as api:
        ready = api.readiness()

    assert answer.choices and ready.trainer_registered
    secret = read_run_secret(home.run_dir(live)) or ""
    shown = str(status) + status._repr_html_() + str(status.to_dict())
    assert secret not in shown and "/***/v1" in str(status)


def _probe_user() -> str:
    """A throwaway second OS user (created once); skipped where that is impossible, except in CI."""
    if os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("runuser") is None:
        skip_or_fail("needs root, useradd and runuser to act as a second OS user")
    known = subprocess.run(["id", "-u", PROBE_USER], capture_output=True, check=False).returncode == 0
    if not known:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PROBE_USER],
            check=True,
            capture_output=True,
        )
    return PROBE_USER


def _as_probe(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", _probe_user(), "--", *argv], capture_output=True, text=True, timeout=30, check=False
    )


def _http_code_as_probe(port: int, method: str, path: str, *headers: str) -> str:
    """The status code the probe user gets for one request, sent from bash's /dev/tcp: bash is on every machine,
    where curl or a Python the probe may run are not."""
    head = [f"{method} {path} HTTP/1.0", "Host: 127.0.0.1", "Content-Type: application/json", "Content-Length: 2"]
    request = "\r\n".join([*head, *headers, "", "{}"])
    script = 'exec 3<>"/dev/tcp/127.0.0.1/$0" && printf "%s" "$1" >&3 && head -n 1 <&3'
    status_line = _as_probe("bash", "-c", script, str(port), request).stdout.split()
    return status_line[1] if len(status_line) > 1 else "no answer"


def test_another_os_user_can_neither_read_the_run_nor_get_past_401(live: str) -> None:
    probe = _probe_user()
    run_dir = home.run_dir(live)
    status = run(rl_check_status(live))
    inference = urlsplit(status.inference_url or "").port
    api = urlsplit(status.api_url or "").port
    assert inference and api

    # The folder above the home is open to everyone: only hermes-nb's modes can keep the probe out.
    assert _as_probe("ls", str(home.home_dir().parent)).returncode == 0, probe
    readings = [_as_probe("ls", str(path)) for path in (home.home_dir(), home.runs_dir(), home.logs_dir(), run_dir)] + [
        _as_probe("cat", str(path)) for path in (run_dir / RUN_SECRET_FILE, run_dir / "config.yaml")
    ]
    codes = [
        _http_code_as_probe(api, "GET", "/health"),
        _http_code_as_probe(api, "GET", "/batch"),
        _http_code_as_probe(api, "POST", "/scored_data"),
        _http_code_as_probe(inference, "GET", "/health"),
        _http_code_as_probe(inference, "GET", "/v1/models"),
        _http_code_as_probe(inference, "GET", "/not-the-secret/v1/models"),
        _http_code_as_probe(inference, "POST", "/v1/completions", "Authorization: Bearer not-the-secret"),
    ]

    assert all(r.returncode != 0 and "Permission denied" in r.stderr for r in readings), [r.stderr for r in readings]
    assert codes == ["401"] * len(codes)
