"""The dashboard in a real JupyterLab 4 and a real Jupyter Notebook 7 in headless Chromium, checked the way a person
sees it.

One story, step by step with a screenshot at each: run ``%load_ext hermes_nb`` and ``hermes_nb.dashboard()``
with Shift+Enter; the picker lists the shipped environments; choosing one fills the config form; locked fields
are disabled; an invalid value shows its error inline and Apply changes nothing; Start shows progress and the
plot image changes while the run goes on after the cell has finished; Stop ends with ``stopped``. The same story
runs in both front ends (one server serves both; only the notebook's URL and the kernel-status element differ).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from lab_server import READY_TIMEOUT_S, STOP_TIMEOUT_S, JupyterLabServer
from notebook_page import JUPYTERLAB, NOTEBOOK7, FrontEnd, NotebookPage, Screenshots, report, wait_until

SHIPPED_ENVIRONMENTS = ("arithmetic", "reverse_string", "count_letters", "sort_letters")
DOCS_IMAGE = Path(__file__).resolve().parents[2] / "docs" / "img" / "dashboard.png"
UPDATE_DOCS_VAR = "HERMES_NB_UPDATE_DOCS_IMG"

NOTEBOOK = "dashboard.ipynb"
LOAD, DASHBOARD, SHOW_CONFIG, QUICK_CONFIG = range(4)
CELLS = [
    "%load_ext hermes_nb",
    "import hermes_nb\n\nhermes_nb.dashboard()",
    "import json\n\n"
    "config = (await hermes_nb.rl_get_current_config()).values()\n"
    'print("CONFIG", json.dumps({name: config[name] for name in ("env.group_size", "env.total_steps")}))',
    # quick_test.yaml's sizes, with enough steps that Stop lands mid-run
    'await hermes_nb.rl_load_config("configs/quick_test.yaml")\nawait hermes_nb.rl_edit_config("env.total_steps", 200)',
]

PICKER = ".hermes-nb-picker select"
FORM = ".hermes-nb-config-form"
GROUP_SIZE = ".hermes-nb-field-env-group_size input"
TOTAL_STEPS = ".hermes-nb-field-env-total_steps input"
GROUP_SIZE_ERROR = ".hermes-nb-error-env-group_size"
TOTAL_STEPS_ERROR = ".hermes-nb-error-env-total_steps"
FORM_STATUS = ".hermes-nb-form-status"
RUN_STATUS = ".hermes-nb-status"
PLOT = "img.hermes-nb-plot"
DASHBOARD_VIEW = ".hermes-nb-dashboard"
MONITOR = ".hermes-nb-run-monitor"

# Limits of single waits. A kernel's first start and the import of the notebook stack take the longest; a training
# step on the shared CPU cores takes a few seconds. A widget's answer gets WIDGET_S of an idle kernel
# (NotebookPage.wait_for_answer): time the kernel is busy does not count.
KERNEL_START_S = 90.0
CELL_S = 60.0
WIDGET_S = 30.0
PLOT_CHANGES_S = 150.0
STOP_S = 90.0
PLOT_FINISH_S = 15.0  # a few refresh intervals (1 s each)
PLOT_FRAMES_WANTED = 3  # the first frame and two changes
# The mid-run screenshot (docs/img/dashboard.png) waits for a few training steps, so the plot shows lines.
PROGRESS_STEPS_WANTED = 3
# The whole test's limit (pytest-timeout) is every named wait of the story in full (5 widget waits, 9 cells, the
# kernel, the plot's changes, the stop, the caption), plus JupyterLab's start and stop and two of Playwright's
# default waits: a slow step then fails with its own named wait, not with pytest-timeout's message.
STORY_S = 5 * WIDGET_S + 9 * CELL_S + KERNEL_START_S + PLOT_CHANGES_S + STOP_S + PLOT_FINISH_S
TEST_TIMEOUT_S = READY_TIMEOUT_S + STORY_S + 3 * STOP_TIMEOUT_S + 60

pytestmark = [pytest.mark.browser, pytest.mark.timeout(TEST_TIMEOUT_S)]

# Tall enough for the whole dashboard (picker, form with its first section open, monitor, plot) in one picture.
DOCS_VIEWPORT_HEIGHT = 2300


@pytest.mark.parametrize("front_end", [JUPYTERLAB, NOTEBOOK7], ids=lambda front_end: front_end.name)
def test_dashboard_story(
    request: pytest.FixtureRequest,
    front_end: FrontEnd,
    jupyterlab: JupyterLabServer,
    page: Any,
    screenshots: Screenshots,
) -> None:
    if front_end is NOTEBOOK7 and importlib.util.find_spec("notebook") is None:
        pytest.fail("Jupyter Notebook 7 is not installed (the notebook package); install the 'browser' extra")
    started = time.monotonic()
    notebook = NotebookPage(page, front_end)
    try:
        best = _story(jupyterlab, page, notebook, screenshots)
    except BaseException:
        _record_failure(request, page, notebook, screenshots)
        raise
    if os.environ.get(UPDATE_DOCS_VAR) == "1" and front_end is JUPYTERLAB:  # the docs picture is JupyterLab's
        shutil.copyfile(best, DOCS_IMAGE)
        report(request.config, f"\nupdated {DOCS_IMAGE} from {best}")
    report(request.config, f"\nbrowser test story in {front_end.name} took {time.monotonic() - started:.0f} s")


def _story(jupyterlab: JupyterLabServer, page: Any, notebook: NotebookPage, screenshots: Screenshots) -> Path:
    jupyterlab.create_notebook(NOTEBOOK, CELLS)
    url = notebook.front_end.url(jupyterlab.url, NOTEBOOK, jupyterlab.token)
    notebook.open(url, cells=len(CELLS), timeout_s=WIDGET_S)
    notebook.wait_for_kernel(KERNEL_START_S, attached=jupyterlab.kernel_attached)
    notebook.run_cell(LOAD, CELL_S)
    assert "Error" not in notebook.output_text(LOAD), notebook.output_text(LOAD)
    notebook.run_cell(DASHBOARD, CELL_S)
    page.locator(DASHBOARD_VIEW).wait_for()
    screenshots.take(page, "dashboard-shown", DASHBOARD_VIEW)

    _picker_lists_the_shipped_environments(page, screenshots)
    _choosing_fills_the_form_and_locked_fields_are_disabled(page, notebook, screenshots)
    _invalid_value_shows_inline_error_and_apply_changes_nothing(page, notebook, screenshots)
    _valid_edits_apply_together(page, notebook, screenshots)
    notebook.run_cell(QUICK_CONFIG, CELL_S)
    assert "Error" not in notebook.output_text(QUICK_CONFIG), notebook.output_text(QUICK_CONFIG)

    best = _start_shows_progress_and_the_plot_changes_after_the_cell_finished(page, notebook, screenshots)
    _stop_ends_with_stopped(page, screenshots)

    errors = notebook.front_end.errors_of_ours(page.hermes_errors)
    assert not errors, "the page logged errors:\n" + "\n".join(errors)
    return best


def _record_failure(request: pytest.FixtureRequest, page: Any, notebook: NotebookPage, shots: Screenshots) -> None:
    """What the page showed when the story broke: a screenshot, each cell's output, the page's errors."""
    try:
        shots.take(page, "failure")
        outputs = [f"--- cell {i}: {notebook.prompt(i)}\n{notebook.output_text(i)}" for i in range(len(CELLS))]
    except Exception as exc:  # the page itself may be gone; the original failure matters more
        outputs = [f"(could not read the page: {exc})"]
    report(request.config, "\n" + "\n".join([*outputs, *page.hermes_errors]))


def _picker_lists_the_shipped_environments(page: Any, screenshots: Screenshots) -> None:
    options = page.locator(f"{PICKER} option")
    wait_until(lambda: options.count() >= len(SHIPPED_ENVIRONMENTS), WIDGET_S, "the picker's options", page)
    labels = options.all_inner_texts()
    for name in SHIPPED_ENVIRONMENTS:
        assert any(label.startswith(name) for label in labels), f"{name} not in the picker: {labels}"
    screenshots.take(page, "picker", DASHBOARD_VIEW)


def _choosing_fills_the_form_and_locked_fields_are_disabled(
    page: Any, notebook: NotebookPage, screenshots: Screenshots
) -> None:
    labels = page.locator(f"{PICKER} option").all_inner_texts()
    page.locator(PICKER).select_option(label=next(label for label in labels if label.startswith("arithmetic")))
    form = page.locator(FORM)
    notebook.wait_for_answer(lambda: "of arithmetic" in form.inner_text(), WIDGET_S, "the form to show arithmetic")
    shown = _shown_config(notebook)
    assert page.locator(GROUP_SIZE).input_value() == str(shown["env.group_size"])
    assert page.locator(TOTAL_STEPS).input_value() == str(shown["env.total_steps"])
    assert page.locator(".hermes-nb-field-env-digits").count() == 1, "arithmetic's own field is missing"
    assert page.locator(GROUP_SIZE).is_enabled()

    locked = page.locator(".hermes-nb-locked input")
    assert locked.count() > 0, "no locked field shown"
    assert all(locked.nth(i).is_disabled() for i in range(locked.count()))
    assert page.locator(".hermes-nb-field-environment input").input_value() == "arithmetic"
    screenshots.take(page, "arithmetic-chosen", DASHBOARD_VIEW)


def _invalid_value_shows_inline_error_and_apply_changes_nothing(
    page: Any, notebook: NotebookPage, screenshots: Screenshots
) -> None:
    before = _shown_config(notebook)
    _type(page, GROUP_SIZE, "1")
    _type(page, TOTAL_STEPS, "200")  # valid alone: all or nothing means it is not applied either
    page.locator("button.hermes-nb-apply").click()

    error = page.locator(GROUP_SIZE_ERROR)
    notebook.wait_for_answer(lambda: error.inner_text().strip(), WIDGET_S, "the inline error beside group_size")
    assert "2" in error.inner_text(), f"the error does not say what is accepted: {error.inner_text()!r}"
    assert not page.locator(TOTAL_STEPS_ERROR).inner_text().strip()
    assert "Nothing applied" in page.locator(FORM_STATUS).inner_text()
    assert page.locator(GROUP_SIZE).input_value() == "1", "the refused value should stay for the user to fix"
    screenshots.take(page, "invalid-value", ".hermes-nb-field-env-group_size")
    assert _shown_config(notebook) == before


def _valid_edits_apply_together(page: Any, notebook: NotebookPage, screenshots: Screenshots) -> None:
    _type(page, GROUP_SIZE, "4")
    page.locator("button.hermes-nb-apply").click()
    status = page.locator(FORM_STATUS)
    notebook.wait_for_answer(lambda: "Nothing applied" not in status.inner_text(), WIDGET_S, "the form to apply")
    assert not page.locator(GROUP_SIZE_ERROR).inner_text().strip()
    assert _shown_config(notebook) == {"env.group_size": 4, "env.total_steps": 200}
    screenshots.take(page, "applied", ".hermes-nb-field-env-group_size")


def _start_shows_progress_and_the_plot_changes_after_the_cell_finished(
    page: Any, notebook: NotebookPage, screenshots: Screenshots
) -> Path:
    """Start, watch the plot's image bytes change twice and the progress bar move; return the mid-run screenshot."""
    dashboard_prompt = notebook.prompt(DASHBOARD)
    page.locator("button.hermes-nb-start").click()
    status = page.locator(RUN_STATUS)
    wait_until(lambda: "running" in status.inner_text(), CELL_S, "the run to be running", page)
    frames: list[str] = []
    deadline = time.monotonic() + PLOT_CHANGES_S
    while len(frames) < PLOT_FRAMES_WANTED:
        digest = wait_until(
            lambda: _new_frame(notebook, frames),
            max(deadline - time.monotonic(), 1.0),
            f"plot frame {len(frames) + 1} (seen {len(frames)}; status: {status.inner_text()!r})",
            page,
        )
        frames.append(digest)
        # the dashboard cell finished long ago: this frame reached the page from the kernel's refresh thread
        assert notebook.prompt(DASHBOARD) == dashboard_prompt
        screenshots.take(page, f"plot-frame-{len(frames)}", MONITOR)
    wait_until(
        lambda: _progress_step(page) >= PROGRESS_STEPS_WANTED and _plot_step(page) >= PROGRESS_STEPS_WANTED,
        max(deadline - time.monotonic(), 1.0),
        f"the progress bar and the plot to reach step {PROGRESS_STEPS_WANTED}",
        page,
    )
    assert "running" in status.inner_text(), status.inner_text()
    assert notebook.prompt(DASHBOARD) == dashboard_prompt
    return _whole_dashboard_shot(page, screenshots)


def _whole_dashboard_shot(page: Any, screenshots: Screenshots) -> Path:
    """The mid-run picture for the docs: picker, form, monitor and plot in one view (a page as tall as them)."""
    normal = page.viewport_size
    page.set_viewport_size({"width": normal["width"], "height": DOCS_VIEWPORT_HEIGHT})
    try:
        return screenshots.take(page, "mid-run", DASHBOARD_VIEW)
    finally:
        page.set_viewport_size(normal)


def _new_frame(notebook: NotebookPage, frames: list[str]) -> str | None:
    """The digest of the plot's image when it differs from every frame seen so far."""
    digest = notebook.image_digest(PLOT)
    return digest if digest is not None and digest not in frames else None


def _plot_step(page: Any) -> int:
    """The step the plot's caption names ("<run> · step 3 · live"); 0 while it has no metrics."""
    match = re.search(r"step (\d+)", page.locator(".hermes-nb-plot-caption").inner_text())
    return int(match.group(1)) if match else 0


def _progress_step(page: Any) -> int:
    """The step the progress bar's label shows ("12/200"); its total must be the configured one."""
    label = page.locator(".hermes-nb-progress").inner_text().strip()
    step, _, total = label.partition("/")
    assert total == "200", f"progress label {label!r}"
    return int(step)


def _stop_ends_with_stopped(page: Any, screenshots: Screenshots) -> None:
    page.locator("button.hermes-nb-stop").click()
    status = page.locator(RUN_STATUS)
    wait_until(lambda: "stopped" in status.inner_text(), STOP_S, "status stopped", page)
    assert page.locator(".hermes-nb-status-stopped").count() == 1
    assert page.locator("button.hermes-nb-start").is_enabled()
    assert page.locator("button.hermes-nb-stop").is_disabled()
    # the plot's refresh thread notices the end by itself and leaves its final frame
    caption = page.locator(".hermes-nb-plot-caption")
    wait_until(lambda: "finished" in caption.inner_text(), PLOT_FINISH_S, "the plot caption to say finished", page)
    screenshots.take(page, "stopped", MONITOR)


def _type(page: Any, selector: str, text: str) -> None:
    """Type into a number field and leave it (Tab), which is when the widget sends the value to the kernel."""
    field = page.locator(selector)
    field.fill(text)
    field.press("Tab")


def _shown_config(notebook: NotebookPage) -> dict[str, Any]:
    """Run the cell that prints the core's current config; its two watched values."""
    notebook.run_cell(SHOW_CONFIG, CELL_S)
    line = next((ln for ln in notebook.output_text(SHOW_CONFIG).splitlines() if ln.startswith("CONFIG ")), None)
    assert line is not None, notebook.output_text(SHOW_CONFIG)
    return dict(json.loads(line.removeprefix("CONFIG ")))
