"""The points of one run, per metric key, accumulated from rows as they arrive.

Rows come from two files (trainer and environment) that may both carry a key (``train/percent_correct``), and
a restarted writer may repeat a step; keyed by step, the last value for a step wins and each point is kept once.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from hermes_nb.protocol.metrics import MetricsRow

FloatArray = np.ndarray


class RunSeries:
    """Per-key ``{step: value}`` with sorted arrays cached until the key changes."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = tuple(keys)
        self._points: dict[str, dict[int, float]] = {key: {} for key in self._keys}
        self._cache: dict[str, tuple[FloatArray, FloatArray]] = {}
        self._smoothed: dict[tuple[str, float], FloatArray] = {}

    def add_rows(self, rows: Iterable[MetricsRow]) -> bool:
        """Take the plotted keys of ``rows``; True when a point was added or changed."""
        changed = False
        for row in rows:
            for key in self._keys:
                value = row.values.get(key)
                if value is None or self._points[key].get(row.step) == value:
                    continue
                self._points[key][row.step] = float(value)
                self._forget(key)
                changed = True
        return changed

    def arrays(self, key: str) -> tuple[FloatArray, FloatArray]:
        """``(steps_N, values_N)`` sorted by step."""
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        points = self._points[key]
        steps = np.fromiter(sorted(points), dtype=float, count=len(points))
        values = np.fromiter((points[int(s)] for s in steps), dtype=float, count=len(points))
        self._cache[key] = (steps, values)
        return steps, values

    def smoothed(self, key: str, smoothing: float) -> FloatArray:
        """The values of ``arrays(key)`` after ``ema``, cached like them: unchanged data is not smoothed again."""
        cached = self._smoothed.get((key, smoothing))
        if cached is None:
            cached = self._smoothed[(key, smoothing)] = ema(self.arrays(key)[1], smoothing)
        return cached

    def _forget(self, key: str) -> None:
        self._cache.pop(key, None)
        for cache_key in [k for k in self._smoothed if k[0] == key]:
            del self._smoothed[cache_key]

    def count(self, key: str) -> int:
        return len(self._points[key])


def ema(values: FloatArray, smoothing: float) -> FloatArray:
    """TensorBoard-style exponential moving average, debiased so the first points are not pulled to zero.

    ``smoothing`` is the weight of the past (0 = raw values, 0.99 = very smooth).
    """
    if smoothing <= 0 or values.size == 0:
        return values
    out: list[float] = []
    last, weight = 0.0, 1.0
    for value in values.tolist():  # plain floats: several times faster than numpy scalars in a loop
        last = last * smoothing + (1 - smoothing) * value
        weight *= smoothing
        out.append(last / (1 - weight))
    return np.asarray(out)
