"""The rollout viewer in a real JupyterLab in headless Chromium: ``%rl_samples`` draws an agent conversation with
its tool call and tool result, and the samples widget shows another step when one is chosen.

The run is written by hand (``tests/rollout_runs.py``, with the trainer's own ``record_batch``): the viewer only
reads the run directory, so no training is needed to see what it shows.
"""

from __future__ import annotations

from typing import Any

import pytest
from lab_server import READY_TIMEOUT_S, STOP_TIMEOUT_S, JupyterLabServer
from notebook_page import NotebookPage, Screenshots, report
from rollout_runs import TOOL_RESULT, write_tool_run

NOTEBOOK = "samples.ipynb"
LOAD, MAGIC, WIDGET = range(3)
CELLS = [
    "%load_ext hermes_nb",
    "%rl_samples --step 2 -n 1",
    "from hermes_nb.notebook import SamplesViewer\n\nSamplesViewer()",
]
KERNEL_START_S = 90.0
CELL_S = 60.0
WIDGET_S = 30.0
# Every named wait in full (4 widget waits, 3 cells, the kernel) and JupyterLab's start and stop: a slow step fails
# with its own named wait, not with pytest-timeout's message.
TEST_TIMEOUT_S = READY_TIMEOUT_S + 4 * WIDGET_S + 3 * CELL_S + KERNEL_START_S + 3 * STOP_TIMEOUT_S + 60

pytestmark = [pytest.mark.browser, pytest.mark.timeout(TEST_TIMEOUT_S)]


def test_rollout_viewer_in_jupyterlab(
    request: pytest.FixtureRequest, jupyterlab: JupyterLabServer, page: Any, screenshots: Screenshots
) -> None:
    write_tool_run()
    jupyterlab.create_notebook(NOTEBOOK, CELLS)
    notebook = NotebookPage(page)
    try:
        notebook.open(jupyterlab.lab_url(NOTEBOOK), cells=len(CELLS), timeout_s=WIDGET_S)
        notebook.wait_for_kernel(KERNEL_START_S)
        notebook.run_cell(LOAD, CELL_S)
        _the_magic_draws_the_tool_call_and_its_result(notebook, screenshots, page)
        _the_widget_shows_the_step_chosen(notebook, screenshots, page)
    except BaseException:
        screenshots.take(page, "failure")
        report(request.config, "\n" + "\n".join(f"cell {i}: {notebook.output_text(i)}" for i in range(len(CELLS))))
        raise
    assert not page.hermes_errors, "the page logged errors:\n" + "\n".join(page.hermes_errors)


def _the_magic_draws_the_tool_call_and_its_result(notebook: NotebookPage, screenshots: Screenshots, page: Any) -> None:
    notebook.run_cell(MAGIC, CELL_S)
    output = notebook.cell(MAGIC)
    call = output.locator(".hermes-nb-tool-call")
    notebook.wait_for_answer(lambda: call.count() == 1, WIDGET_S, "the tool call of the conversation")
    assert "get_weather(" in call.inner_text() and "Paris" in call.inner_text()
    assert TOOL_RESULT in output.locator(".hermes-nb-tool-result").inner_text()
    assert "It is 18 C in Paris." in output.inner_text()
    assert "score 1 (correct)" in output.inner_text()
    assert call.is_visible()
    screenshots.take(page, "rl-samples-tool-call", ".hermes-nb-sample")


def _the_widget_shows_the_step_chosen(notebook: NotebookPage, screenshots: Screenshots, page: Any) -> None:
    notebook.run_cell(WIDGET, CELL_S)
    view = page.locator(".hermes-nb-samples-view")
    notebook.wait_for_answer(lambda: "get_weather(" in view.inner_text(), WIDGET_S, "the widget's last step (2)")
    page.locator(".hermes-nb-samples-step select").select_option("1")
    notebook.wait_for_answer(lambda: "2+2=" in view.inner_text(), WIDGET_S, "the widget to show step 1")
    assert "get_weather" not in view.inner_text()
    screenshots.take(page, "samples-widget-step-1", ".hermes-nb-samples")
