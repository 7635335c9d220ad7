"""Debian's headless Chromium driven by Playwright, and a notebook page (JupyterLab 4 or Jupyter Notebook 7) seen the
way a person sees it.

Playwright cannot download its own browser on these machines, so it drives ``/usr/bin/chromium``
(scripts/ensure_chromium.sh installs it). Waits poll what is on screen; there are no fixed sleeps.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",  # runs as root in a container, where Chromium's sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # nothing may reach the network: no component updates, sync, or background requests
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 1200}  # tall enough for the run monitor and the plot together
# How often a wait re-reads the page: fast enough that a wait costs little more than the thing it waits for.
POLL_MS = 100
# A widget's answer waits behind whatever the kernel is busy with, such as first-use work on a cold machine (the
# first import of the notebook stack, caches built on it): a wait for an answer counts only the time the kernel is
# idle, and gives up on a kernel busy for this long in all (well inside the test's own limit).
KERNEL_BUSY_MOST_S = 150.0
PROMPT_DONE = re.compile(r"^\[(\d+)\]:$")

T = TypeVar("T")


@dataclass(frozen=True)
class FrontEnd:
    """What differs between the front ends the browser story runs in. Notebook 7 is built from JupyterLab 4's
    components, so cells, prompts, outputs, dialogs and the widgets are the same elements in both."""

    name: str
    path: str  # where a notebook opens: /<path>/<notebook>
    # JupyterLab's left sidebar (the file browser) is folded away so the notebook has the width; Notebook 7 has none
    has_left_sidebar: bool
    # JupyterLab's status bar reads "| Idle" only once a kernel is attached and connected (its toolbar's execution
    # indicator says idle before that); Notebook 7 has no status bar, and its execution indicator goes through
    # "initializing" and "connecting" before "idle" but may also read idle before that (NotebookPage.wait_for_kernel)
    has_status_bar: bool
    # Errors the front end's own page logs with no hermes-nb code on it (seen on a notebook that only prints)
    own_page_errors: tuple[str, ...] = ()

    def url(self, server_url: str, notebook: str, token: str) -> str:
        return f"{server_url}/{self.path}/{notebook}?token={token}"

    def errors_of_ours(self, errors: list[str]) -> list[str]:
        """The page's errors less those the front end logs by itself."""
        return [error for error in errors if not any(own in error for own in self.own_page_errors)]


JUPYTERLAB = FrontEnd("jupyterlab", "lab/tree", has_left_sidebar=True, has_status_bar=True)
# Notebook 7.6's settings loader throws this TypeError on every page load, an empty notebook's included.
NOTEBOOK7_SETTINGS_ERROR = "Cannot read properties of undefined (reading 'schema')"
NOTEBOOK7 = FrontEnd(
    "notebook7", "notebooks", has_left_sidebar=False, has_status_bar=False, own_page_errors=(NOTEBOOK7_SETTINGS_ERROR,)
)


def launch_chromium(playwright: Any, user_data_dir: Path) -> Any:
    """A persistent context (a new, empty profile in ``user_data_dir``) on /usr/bin/chromium.

    Raises RuntimeError with the reason when the browser cannot start.
    """
    if not CHROMIUM.exists():
        raise RuntimeError(f"{CHROMIUM} does not exist; run scripts/ensure_chromium.sh (as root) to install it")
    try:
        return playwright.chromium.launch_persistent_context(
            str(user_data_dir),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport=VIEWPORT,
        )
    except Exception as exc:  # Playwright raises its own Error with Chromium's output in the message
        raise RuntimeError(f"Chromium at {CHROMIUM} could not start: {exc}") from exc


def wait_until(probe: Callable[[], T | None], timeout_s: float, what: str, page: Any) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        page.wait_for_timeout(POLL_MS)


@dataclass
class Screenshots:
    folder: Path
    taken: list[Path] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # when each was taken, from the start of the test
    started: float = field(default_factory=time.monotonic)

    def take(self, page: Any, name: str, focus: str | None = None) -> Path:
        """A screenshot of the page, numbered in the order taken; ``focus`` is scrolled to the top first.

        The page, not the element: JupyterLab scrolls the notebook inside its own panel, so an element
        screenshot of a widget taller than that panel comes out mostly blank.
        """
        path = self.folder / f"{len(self.taken) + 1:02d}-{name}.png"
        if focus is not None:
            page.locator(focus).first.evaluate("(el) => el.scrollIntoView({block: 'start'})")
        page.screenshot(path=str(path))
        self.taken.append(path)
        self.seconds.append(time.monotonic() - self.started)
        return path

    def timeline(self) -> str:
        return "\n".join(f"  {s:6.1f} s  {p.name}" for p, s in zip(self.taken, self.seconds, strict=True))


def report(config: Any, line: str) -> None:
    """A line on pytest's terminal even without ``-s`` (the screenshot folder, for one)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


class NotebookPage:
    def __init__(self, page: Any, front_end: FrontEnd = JUPYTERLAB) -> None:
        self.page = page
        self.front_end = front_end

    def open(self, url: str, cells: int, timeout_s: float) -> None:
        """Open the notebook, then fold the file browser away (JupyterLab) so the notebook has the width."""
        self.page.goto(url)
        self.page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(cells - 1).wait_for(timeout=timeout_s * 1000)
        if not self.front_end.has_left_sidebar:
            return
        self.page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current").click()

    def wait_for_kernel(self, timeout_s: float, attached: Callable[[], bool] | None = None) -> None:
        """Wait until the page's kernel is connected and idle: a cell run before that is silently dropped.

        ``attached`` is the server's word that a page's websocket is on an idle kernel, for a front end whose
        execution indicator can read idle before its kernel is attached (Notebook 7's, on a busy machine).
        """

        def ready() -> bool:
            return not self.kernel_busy() and (attached is None or attached())

        wait_until(ready, timeout_s, "an idle kernel", self.page)

    def kernel_busy(self) -> bool:
        """Whether the page's kernel status says anything but idle: busy, starting, connecting, restarting."""
        if self.front_end.has_status_bar:
            return "| Idle" not in self.page.locator("#jp-main-statusbar").inner_text()
        indicator = self.page.locator(".jp-NotebookPanel-toolbar .jp-Notebook-ExecutionIndicator")
        return indicator.count() == 0 or indicator.first.get_attribute("data-status") != "idle"

    def wait_for_answer(self, probe: Callable[[], T | None], idle_s: float, what: str) -> T:
        """Poll ``probe`` after a widget action until it returns something truthy; fail after ``idle_s`` of the
        kernel sitting idle without the answer, or once the kernel has been busy ``KERNEL_BUSY_MOST_S`` in all."""
        idle_left, busy_s = idle_s, 0.0
        last = time.monotonic()
        while True:
            value = probe()
            if value:
                return value
            now, busy = time.monotonic(), self.kernel_busy()
            busy_s += now - last if busy else 0.0
            idle_left -= 0.0 if busy else now - last
            last = now
            if idle_left <= 0:
                raise AssertionError(f"timed out after {idle_s:.0f} s of an idle kernel waiting for {what}")
            if busy_s >= KERNEL_BUSY_MOST_S:
                raise AssertionError(f"the kernel stayed busy for {busy_s:.0f} s while waiting for {what}")
            self.page.wait_for_timeout(POLL_MS)

    def cell(self, index: int) -> Any:
        return self.page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(index)

    def prompt(self, index: int) -> str:
        return str(self.cell(index).locator(".jp-InputPrompt").first.inner_text()).strip()

    def run_cell(self, index: int, timeout_s: float) -> int:
        """Run cell ``index`` with Shift+Enter, as a person does; wait for its new execution count and return it."""
        before = self.prompt(index)
        self.cell(index).locator(".jp-InputArea-editor .cm-content").click()
        self.page.keyboard.press("Shift+Enter")

        def finished() -> int | None:
            self.fail_on_dialog()
            shown = self.prompt(index)
            match = PROMPT_DONE.match(shown)
            return int(match.group(1)) if match and shown != before else None

        return wait_until(finished, timeout_s, f"cell {index} to finish running", self.page)

    def fail_on_dialog(self) -> None:
        """A modal dialog blocks every click and key; say what it asks instead of timing out behind it."""
        dialog = self.page.locator(".jp-Dialog")
        if dialog.count() and dialog.first.is_visible():
            raise AssertionError(f"{self.front_end.name} shows a dialog: {dialog.first.inner_text()!r}")

    def output_text(self, index: int) -> str:
        return "\n".join(self.cell(index).locator(".jp-OutputArea-output").all_inner_texts())

    def image_digest(self, selector: str) -> str | None:
        """sha256 of the bytes the <img> shows now (its src fetched in the page), None while it shows nothing."""
        digest = self.page.evaluate(
            """async (selector) => {
                const img = document.querySelector(selector);
                if (!img || !img.getAttribute("src")) return null;
                const bytes = await (await fetch(img.src)).arrayBuffer();
                if (!bytes.byteLength) return null;
                const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
                return Array.from(hash, (b) => b.toString(16).padStart(2, "0")).join("");
            }""",
            selector,
        )
        return str(digest) if digest else None
