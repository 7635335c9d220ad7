"""The points of one run, per metric key, accumulated from rows as they arrive.

Rows come from two files (trainer and environment), each key from one of them (``train/*`` the trainer's, the
trained batch; ``eval/*`` and ``env/*`` the environment's), and a restarted writer may repeat a step: the last
value for a step wins and each step is kept once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from hermes_nb.protocol.metrics import MetricsRow

FloatArray = np.ndarray
# ema() scales a chunk by up to a^-n; 10^100 keeps the cumulative sum far from float64's 10^308.
EMA_MAX_EXPONENT = 100.0
EMPTY: FloatArray = np.empty(0)


class RunSeries:
    """Per-key points sorted by step, appended cheaply (the usual case) and re-sorted only when a row is late.

    The arrays (and their smoothed values) are cached and, when rows only add points at the end, extended
    rather than rebuilt: converting 10,000 points again on every frame would cost more than drawing them.
    """

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = tuple(keys)
        self._steps: dict[str, list[int]] = {key: [] for key in self._keys}
        self._values: dict[str, list[float]] = {key: [] for key in self._keys}
        self._index: dict[str, dict[int, int]] = {key: {} for key in self._keys}  # step -> position
        self._cache: dict[str, tuple[FloatArray, FloatArray]] = {}
        self._smoothed: dict[tuple[str, float], FloatArray] = {}

    def add_rows(self, rows: Iterable[MetricsRow]) -> bool:
        """Take the plotted keys of ``rows``; True when a point was added or changed."""
        changed = False
        for row in rows:
            for key in self._keys:
                value = row.values.get(key)
                if value is None:
                    continue
                first_changed = self._put(key, row.step, float(value))
                if first_changed is not None:
                    self._keep_cached(key, first_changed)
                    changed = True
        return changed

    def _put(self, key: str, step: int, value: float) -> int | None:
        """Store one point; the position of the first point that changed, None when nothing did."""
        steps, values, index = self._steps[key], self._values[key], self._index[key]
        position = index.get(step)
        if position is not None:  # a step seen before (a restarted writer): the last value wins
            if values[position] == value:
                return None
            values[position] = value
            return position
        index[step] = len(steps)
        steps.append(step)
        values.append(value)
        if len(steps) > 1 and steps[-2] > step:  # late row: keep the points sorted by step
            order = sorted(range(len(steps)), key=steps.__getitem__)
            self._steps[key] = [steps[i] for i in order]
            self._values[key] = [values[i] for i in order]
            self._index[key] = {s: i for i, s in enumerate(self._steps[key])}
        return self._index[key][step]

    def arrays(self, key: str) -> tuple[FloatArray, FloatArray]:
        """``(steps_N, values_N)`` sorted by step."""
        cached = self._cache.get(key, (EMPTY, EMPTY))
        done = cached[0].size
        if done == len(self._steps[key]):
            return cached
        more_steps = np.asarray(self._steps[key][done:], dtype=float)
        more_values = np.asarray(self._values[key][done:], dtype=float)
        cached = self._cache[key] = (np.concatenate((cached[0], more_steps)), np.concatenate((cached[1], more_values)))
        return cached

    def smoothed(self, key: str, smoothing: float) -> FloatArray:
        """The values of ``arrays(key)`` after ``ema``, cached like them: only new points are smoothed."""
        values = self.arrays(key)[1]
        cached = self._smoothed.get((key, smoothing), EMPTY)
        done = cached.size
        if done == values.size:
            return cached
        more = ema(values[done:], smoothing, start=done, previous=float(cached[-1]) if done else 0.0)
        cached = self._smoothed[(key, smoothing)] = np.concatenate((cached, more))
        return cached

    def _keep_cached(self, key: str, first_changed: int) -> None:
        """Cut the cached arrays of ``key`` to the points before ``first_changed``: those are still right."""
        if key in self._cache:
            self._cache[key] = (self._cache[key][0][:first_changed], self._cache[key][1][:first_changed])
        for cache_key in [k for k in self._smoothed if k[0] == key]:
            self._smoothed[cache_key] = self._smoothed[cache_key][:first_changed]

    def count(self, key: str) -> int:
        return len(self._steps[key])


def ema(values: FloatArray, smoothing: float, start: int = 0, previous: float = 0.0) -> FloatArray:
    """TensorBoard-style exponential moving average, debiased so the first points are not pulled to zero.

    ``smoothing`` is the weight of the past (0 = raw values, 0.99 = very smooth). Vectorised in chunks:
    y_t = a^(t+1) y_-1 + (1-a) a^t cumsum(x_i a^-i); a chunk is short enough that a^-i stays below 1e100.
    To continue an average, ``start`` is the number of points before ``values`` and ``previous`` the (debiased)
    average at the last of them.
    """
    if smoothing <= 0 or values.size == 0:
        return values
    chunk = max(1, int(EMA_MAX_EXPONENT / -math.log10(smoothing)))
    out = np.empty(values.size, dtype=float)
    last = previous * (1 - smoothing**start)  # the average before debiasing
    for begin in range(0, values.size, chunk):
        x_n = values[begin : begin + chunk]
        powers_n = smoothing ** np.arange(x_n.size)  # a^0 .. a^(n-1)
        y_n = smoothing * powers_n * last + (1 - smoothing) * powers_n * np.cumsum(x_n / powers_n)
        out[begin : begin + x_n.size] = y_n
        last = float(y_n[-1])
    return out / (1 - smoothing ** np.arange(start + 1, start + values.size + 1))


def decimate(steps: FloatArray, values: FloatArray, bins: int) -> tuple[FloatArray, FloatArray]:
    """At most ``2 * bins`` points with the same look: each bin of consecutive points becomes its min and max.

    A panel is a few hundred pixels wide, so 10,000 points put dozens in each pixel column, and Agg draws that
    column as a vertical stroke from the lowest to the highest value anyway. Drawing the envelope instead of
    every point is several times faster and looks the same.
    """
    if steps.size <= 2 * bins:
        return steps, values
    starts_B = np.linspace(0, steps.size, bins + 1).astype(int)[:-1]
    low_B = np.minimum.reduceat(values, starts_B)
    high_B = np.maximum.reduceat(values, starts_B)
    values_2B = np.empty(2 * bins)
    values_2B[0::2], values_2B[1::2] = low_B, high_B
    return np.repeat(steps[starts_B], 2), values_2B


def decimate_band(
    steps: FloatArray, low: FloatArray, high: FloatArray, bins: int
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """A band's envelope in at most ``bins`` points: each bin of consecutive points its lowest ``low`` and highest
    ``high`` (as ``decimate``, for a filled band rather than a line)."""
    if steps.size <= 2 * bins:
        return steps, low, high
    starts_B = np.linspace(0, steps.size, bins + 1).astype(int)[:-1]
    return steps[starts_B], np.minimum.reduceat(low, starts_B), np.maximum.reduceat(high, starts_B)
