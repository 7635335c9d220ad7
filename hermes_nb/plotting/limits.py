"""Axis limits that grow ahead of the data, so a growing curve changes them a handful of times per run.

Each change of limits means drawing a panel's axes again (the expensive part of a frame), so limits move only when
the data leaves them, and then with room to spare; but not so much room that the curve looks lost in an empty
panel. The step axis doubles: past a run's first 10 steps the curve fills at least half of its width. A value
axis is fitted to the data with a quarter of the data's span above and below: the curve fills two thirds of its
height or more (a nearly flat curve less, so that its noise does not fill the panel).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Doubling: the curve fills 50-100% of the step axis, and a run of N steps moves it about log2(N / 10) times
# (10 times over 10,000 steps). A larger factor would redraw less often but leave more of the panel empty.
STEP_AXIS_GROWTH = 2.0
# The first step axis: a new run's first few steps share one axis instead of redrawing at 1, 2, 4, 8 steps.
FIRST_STEP_LIMIT = 10.0
# The first step axis of a run that already has steps (a plot opened late, a saved plot) ends at the next of these
# x 10^k: a round end on a tick, with the curve filling 3/4 of the axis or more (the widest gap is 6 -> 8).
FIRST_END_MANTISSAS = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)
# Room above and below the data when a value limit moves, as a share of the data's span: the data then fills
# 1 / (1 + 2 * 0.25) = 2/3 of the height, and a trend has a quarter of its span to go before the next move.
VALUE_HEADROOM = 0.25
# A nearly flat curve is given the span of a tenth of its value, so its noise is not blown up to fill the panel
# (a flat curve at 0 has no scale to go by: it gets a span of 1).
MIN_RELATIVE_SPAN = 0.1
ZERO_SPAN = 1.0


@dataclass(frozen=True)
class Limits:
    x: tuple[float, float]
    y: tuple[float, float]


def nice_ceiling(value: float) -> float:
    """The smallest of ``FIRST_END_MANTISSAS`` x 10^k that is >= ``value`` (``value`` > 0)."""
    exponent = math.floor(math.log10(value))
    return next(m * 10.0**exponent for m in FIRST_END_MANTISSAS if m * 10.0**exponent >= value)


def grow(current: Limits | None, data: Limits) -> Limits:
    """``current`` when ``data`` fits inside it, else limits that hold ``data`` with headroom."""
    x = _grow_x(current.x if current else None, data.x[1])
    y = _grow_y(current.y if current else None, data.y)
    return Limits(x=x, y=y)


def _grow_x(current: tuple[float, float] | None, max_step: float) -> tuple[float, float]:
    if current is not None and max_step <= current[1]:
        return current
    end = current[1] if current is not None else nice_ceiling(max(max_step, FIRST_STEP_LIMIT))
    while end < max_step:
        end *= STEP_AXIS_GROWTH
    return (0.0, end)


def _grow_y(current: tuple[float, float] | None, data: tuple[float, float]) -> tuple[float, float]:
    low, high = data
    if current is not None and current[0] <= low and high <= current[1]:
        return current
    # Fitted to the data alone: padding the old limits again on every move would let the empty margins pile up.
    span = max(high - low, MIN_RELATIVE_SPAN * max(abs(low), abs(high))) or ZERO_SPAN
    pad = span * VALUE_HEADROOM
    return (low - pad, high + pad)
