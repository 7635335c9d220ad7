"""Two-digit addition as a verifiers environment: a ``vf.Taskset`` as verifiers' own tasksets are written.

A verifiers environment (``verifiers.v1``) is a module that exports one ``vf.Taskset`` subclass in ``__all__``;
its id is the module's name (``addition_verifiers``, or ``addition-verifiers``). verifiers' own commands run it
unmodified (``vf-eval addition-verifiers`` with this folder on the search path), and hermes-nb trains on it through
verifiers' train client (``hermes_nb.frameworks.verifiers``).

Task: the user message is ``<a>+<b>=`` with ``a`` and ``b`` of at most two digits, the task the other shipped
examples use (``arithmetic``). Split: every pair ``(a, b)`` is one task; the held-out split is the pairs whose index
``100 * a + b`` is a multiple of ``HELD_OUT_EVERY``, the train split the others, so no held-out problem is ever
trained on; ``split`` (a taskset config field, verifiers has no split of its own) picks one. Reward: 1.0 when the
reply, stripped of surrounding whitespace, is exactly the sum in decimal, else 0.0; the reply's length in
characters is recorded as a metric.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Literal

import verifiers.v1 as vf

__all__ = ["AdditionTaskset"]

# One pair in ten is held out: 1,000 held-out problems, 9,000 to train on.
HELD_OUT_EVERY = 10
PAIRS = 100 * 100


class AdditionData(vf.TaskData):
    answer: str


class AdditionTask(vf.Task[AdditionData]):
    @vf.reward(weight=1.0)
    async def exact_answer(self, trace: vf.Trace) -> float:
        return 1.0 if trace.last_reply == self.data.answer else 0.0

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class AdditionConfig(vf.TasksetConfig):
    split: Literal["train", "held_out"] = "train"
    """Which problems load: the train split, or the held-out one (every HELD_OUT_EVERY-th pair)."""
    seed: int = 0
    """The order the problems load in (a shuffle of the split by this seed)."""


class AdditionTaskset(vf.Taskset[AdditionTask, AdditionConfig]):
    def load(self) -> Iterator[AdditionTask]:
        held_out = self.config.split == "held_out"
        indices = [i for i in range(PAIRS) if (i % HELD_OUT_EVERY == 0) == held_out]
        random.Random(self.config.seed).shuffle(indices)
        for index in indices:
            a, b = divmod(index, 100)
            data = AdditionData(prompt=f"{a}+{b}=", answer=str(a + b), id=f"{a}+{b}")
            yield AdditionTask(data, self.config.task)
