"""The local trainer's GPU time and peak GPU memory, read with torch's documented CUDA API: timing events
(``torch.cuda.Event(enable_timing=True)``, ``Event.elapsed_time``) around each forward-backward and optimizer step,
and ``torch.cuda.max_memory_allocated``. The run's ``cost.json`` takes its GPU figures from these (through the
metrics rows, ``protocol.metrics.TRAIN_GPU_SECONDS``).

On any other device the clock reads nothing and reports nothing: a CPU run's cost has no GPU figure at all, rather
than a zero that would read as "used no GPU time" on a machine that has a GPU.
"""

from __future__ import annotations

from typing import Any

import torch

from hermes_nb.protocol import metrics as keys

MS_PER_SECOND = 1000.0  # Event.elapsed_time answers in milliseconds


class GpuClock:
    """Running totals of one process: GPU seconds between each ``begin`` and the following ``end``, and the peak
    GPU memory allocated so far."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds = 0.0
        self._started: Any = None  # the timing event of the current ``begin``; None between spans

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    def begin(self) -> None:
        """Mark the start of GPU work (a span already begun goes on: forward-backward of several micro-batches)."""
        if not self.on_gpu or self._started is not None:
            return
        self._started = torch.cuda.Event(enable_timing=True)
        self._started.record()

    def end(self) -> None:
        """Close the span: wait for its work on the GPU, then add its time."""
        if self._started is None:
            return
        ended = torch.cuda.Event(enable_timing=True)
        ended.record()
        ended.synchronize()
        self.seconds += self._started.elapsed_time(ended) / MS_PER_SECOND
        self._started = None

    def figures(self) -> dict[str, float]:
        """The totals under the backend's metric names; nothing off a GPU."""
        if not self.on_gpu:
            return {}
        peak = torch.cuda.max_memory_allocated(self.device)
        return {keys.GPU_SECONDS: self.seconds, keys.GPU_PEAK_BYTES: float(peak)}
