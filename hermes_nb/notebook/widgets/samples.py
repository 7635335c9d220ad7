"""The rollout viewer widget: a step picker, an order, a score range and a count over ``rl_get_samples``'s core.

Every change asks the core again (``rollouts.reader.read_samples``, the synchronous file read that
``rl_get_samples`` runs in a worker thread) and shows its HTML form; choosing another
step resets the score range to that step's scores. A user mistake (no samples yet) is shown in place.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets

from hermes_nb.errors import HermesNBError
from hermes_nb.rollouts.reader import read_samples
from hermes_nb.rollouts.samples import DEFAULT_SAMPLES, SampleOrder, SampleView

# A slider needs a range: when every score of a step is equal, it spans this much above it.
_FLAT_RANGE = 1.0
# Slider resolution: fine enough for rewards like 0.25 or 0.1 steps.
_SCORE_STEP = 0.01


class SamplesViewer(widgets.VBox):
    """``SamplesViewer(run_id)``: the samples of a run's steps (default: the newest run, its last step)."""

    def __init__(self, run_id: str | None = None, n: int = DEFAULT_SAMPLES) -> None:
        self.run_id = run_id
        self.step = widgets.Dropdown(description="step", options=[], layout=widgets.Layout(width="160px"))
        self.order = widgets.ToggleButtons(options=["recorded", "worst", "best"], value="recorded")
        self.scores = widgets.FloatRangeSlider(description="score", step=_SCORE_STEP, continuous_update=False)
        self.count = widgets.BoundedIntText(value=n, min=1, max=10_000, description="show")
        self.view = widgets.HTML()
        for control, name in ((self.step, "step"), (self.order, "order"), (self.count, "count"), (self.view, "view")):
            control.add_class(f"hermes-nb-samples-{name}")
        self._quiet = False  # set while the widget sets its own controls, so that does not re-query
        controls = widgets.HBox([self.step, self.order, self.count])
        super().__init__([controls, self.scores, self.view])
        self.add_class("hermes-nb-samples")
        self.shown: SampleView | None = None
        self._load_step(None)
        self.step.observe(self._step_changed, names="value")
        for control in (self.order, self.scores, self.count):
            control.observe(self._filter_changed, names="value")

    def _query(self, step: int | None, score_range: tuple[float, float] | None = None) -> SampleView | None:
        low, high = score_range if score_range is not None else (None, None)
        order: SampleOrder = self.order.value
        try:
            view = read_samples(self.run_id, step, order, int(self.count.value), low, high)
        except HermesNBError as exc:
            self.view.value = f"<div class='hermes-nb-error' style='color:#c62828'>{html.escape(str(exc))}</div>"
            return None
        self.shown = view
        self.view.value = view._repr_html_()
        return view

    def _load_step(self, step: int | None) -> None:
        """Show ``step`` unfiltered and fit the step list and score range to it."""
        view = self._query(step)
        if view is None:
            return
        low, high = view.score_range
        self._quiet = True
        try:
            self.step.options = view.steps
            self.step.value = view.step
            self.scores.min, self.scores.max = -1e12, 1e12  # widen first: min may not pass max while set
            self.scores.min, self.scores.max = low, high if high > low else low + _FLAT_RANGE
            self.scores.value = (self.scores.min, self.scores.max)
        finally:
            self._quiet = False

    def _step_changed(self, change: Any) -> None:
        if not self._quiet:
            self._load_step(change["new"])

    def _filter_changed(self, change: Any) -> None:
        if not self._quiet:
            self._query(self.step.value, tuple(self.scores.value))
