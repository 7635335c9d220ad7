"""Axis limits that grow in steps with headroom, so a growing curve rarely changes them.

Each change of limits means drawing the axes again (the expensive part of a frame); growing the step axis to
the next "nice" number above 1.25x the data, and the value axis by a quarter of its span, makes that happen a
handful of times over a run instead of on every refresh.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Room left beyond the data when a limit has to move: a quarter of the current extent.
HEADROOM = 0.25
NICE_MANTISSAS = (1.0, 2.0, 2.5, 5.0, 10.0)
# A flat curve (one point, or all values equal) still gets a visible value range around it.
MIN_SPAN = 1e-6


@dataclass(frozen=True)
class Limits:
    x: tuple[float, float]
    y: tuple[float, float]


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k that is >= ``value`` (``value`` > 0)."""
    exponent = math.floor(math.log10(value))
    for mantissa in NICE_MANTISSAS:
        candidate = mantissa * 10.0**exponent
        if candidate >= value:
            return candidate
    return 10.0 ** (exponent + 1)


def grow(current: Limits | None, data: Limits) -> Limits:
    """``current`` when ``data`` fits inside it, else limits that hold ``data`` with headroom."""
    x = _grow_x(current.x if current else None, data.x[1])
    y = _grow_y(current.y if current else None, data.y)
    return Limits(x=x, y=y)


def _grow_x(current: tuple[float, float] | None, max_step: float) -> tuple[float, float]:
    if current is not None and max_step <= current[1]:
        return current
    return (0.0, nice_ceiling(max(max_step * (1 + HEADROOM), 1.0)))


def _grow_y(current: tuple[float, float] | None, data: tuple[float, float]) -> tuple[float, float]:
    low, high = data
    if current is not None and current[0] <= low and high <= current[1]:
        return current
    if current is not None:
        low, high = min(low, current[0]), max(high, current[1])
    pad = max(high - low, abs(high) * 0.1, MIN_SPAN) * HEADROOM
    return (low - pad, high + pad)
