"""Fixtures of the browser test: a real JupyterLab, Chromium driven by Playwright, a screenshot folder.

The test is never skipped: when Chromium, Playwright or JupyterLab is missing or cannot start, it fails with
the reason (scripts/ensure_chromium.sh and the ``browser`` extra install them).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lab_server import JupyterLabServer, start_jupyterlab
from notebook_page import Screenshots, launch_chromium, report

SCREENSHOT_DIR_VAR = "HERMES_NB_SCREENSHOT_DIR"
# Playwright's own default is 30 s; a widget answer on two busy cores takes a few seconds at most.
PAGE_TIMEOUT_MS = 30_000


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives JupyterLab in headless Chromium (heavy: run it alone)")


@pytest.fixture
def jupyterlab(tmp_path: Path, hermes_home: Path) -> Iterator[JupyterLabServer]:
    """JupyterLab whose kernels share this test's HERMES_NB_HOME; every run, kernel and the server stop after."""
    env = dict(os.environ)  # HERMES_NB_HOME, WANDB_MODE=offline, no keys: set by tests/conftest.py
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # the kernel's debugger otherwise warns on every start
    failure: str | None = None
    try:
        server = start_jupyterlab(tmp_path / "jupyter", env)
    except RuntimeError as exc:
        failure = f"JupyterLab could not start: {exc}"
    if failure is not None:
        pytest.fail(failure, pytrace=False)  # outside the except: the reason alone, not a chained traceback
    yield server
    stopped_runs = _stop_every_run()
    problems = server.stop()
    assert not problems, f"left behind after the test (runs stopped: {stopped_runs}):\n" + "\n".join(problems)


def _stop_every_run() -> list[str]:
    """Stop any run the test left going (a failed assertion before Stop), through the core, as a user would."""
    from hermes_nb.api import rl_stop_training
    from hermes_nb.runs.run_dirs import known_run_ids

    stopped = []
    for run_id in known_run_ids():
        result = asyncio.run(rl_stop_training(run_id))
        if not result.already_stopped:
            stopped.append(run_id)
    return stopped


@pytest.fixture
def screenshots(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Screenshots]:
    folder = Path(os.environ.get(SCREENSHOT_DIR_VAR) or tmp_path / "browser_screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    shots = Screenshots(folder)
    yield shots
    report(request.config, f"\nbrowser screenshots ({len(shots.taken)}): {folder}\n{shots.timeline()}")


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Any]:
    """A page of a fresh Chromium profile; console errors of the page are collected in ``page.hermes_errors``."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.fail(f"the playwright package is missing ({exc}); install the 'browser' extra", pytrace=False)
    with sync_playwright() as playwright:
        failure: str | None = None
        try:
            context = launch_chromium(playwright, tmp_path / "chromium-profile")
        except RuntimeError as exc:
            failure = str(exc)
        if failure is not None:
            pytest.fail(failure, pytrace=False)
        context.set_default_timeout(PAGE_TIMEOUT_MS)
        browser_page = context.pages[0] if context.pages else context.new_page()
        errors: list[str] = []
        browser_page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
        browser_page.on("console", lambda msg: errors.append(f"console: {msg.text}") if msg.type == "error" else None)
        browser_page.hermes_errors = errors
        try:
            yield browser_page
        finally:
            context.close()
