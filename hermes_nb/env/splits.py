"""Train / held-out splits for procedurally generated tasks: a prompt's hash decides its side, forever.

A generator draws problems from an RNG; ``draw_item`` keeps drawing until it gets one on the requested side,
so a held-out prompt is never handed out for training whatever the seed, and both sides are reproducible per
seed. ``GeneratedItems`` is the split as an environment uses it (``QAEnv`` and ``AgentEnv`` both): training
items from ``self.rng``, held-out items from ``eval_items``.
"""

from __future__ import annotations

import functools
import hashlib
import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar, Literal

from hermes_nb.config import BaseEnvConfig
from hermes_nb.env.types import QAItem

Split = Literal["train", "eval"]

# One prompt in ten is held out: enough distinct evaluation items even for small spaces (2-digit addition has
# 10,000 problems, so 1,000 held out) while nine in ten remain for training.
EVAL_MODULUS = 10
# A generator whose space has no prompt on the requested side would loop forever; this bounds the search.
MAX_DRAWS = 10_000


def is_heldout(prompt: str) -> bool:
    """True for prompts reserved for evaluation. Stable across processes (unlike ``hash``)."""
    digest = hashlib.blake2b(prompt.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % EVAL_MODULUS == 0


def draw_item(generate: Callable[[random.Random], QAItem], rng: random.Random, split: Split) -> QAItem:
    """The next item from ``generate`` whose prompt lies on ``split``'s side of the hash split."""
    want_heldout = split == "eval"
    for _ in range(MAX_DRAWS):
        item = generate(rng)
        if is_heldout(item.prompt) == want_heldout:
            return item
    raise ValueError(f"split: no {split} item in {MAX_DRAWS} draws; the task's problem space is too small")


def heldout_items(
    generate: Callable[[random.Random], QAItem], count: int, *, seed: int, task_name: str
) -> list[QAItem]:
    """``count`` held-out items, the same list for the same task, seed and count (repeats allowed)."""
    # A string seed gives a stream independent of the training stream seeded with the integer ``seed``.
    rng = random.Random(f"{task_name}/eval/{seed}")
    return [draw_item(generate, rng, "eval") for _ in range(count)]


class GeneratedItems(ABC):
    """Mixin for an environment whose items come from ``generate_problem``: training items are drawn from
    ``self.rng`` (seeded with ``config.seed``) and ``eval_items`` are the held-out ones, so no held-out prompt is
    ever trained on. Put it before ``BaseEnv`` among the bases."""

    name: ClassVar[str | None]
    config: BaseEnvConfig

    @functools.cached_property
    def rng(self) -> random.Random:
        """The training items' random stream, seeded with ``config.seed`` (made on first use)."""
        return random.Random(self.config.seed)

    @abstractmethod
    def generate_problem(self, rng: random.Random) -> QAItem:
        """One problem from ``rng``, on either side of the train/held-out split."""

    def train_item(self) -> QAItem:
        """The next training item, drawn from ``self.rng``."""
        return draw_item(self.generate_problem, self.rng, "train")

    def eval_items(self) -> list[QAItem]:
        """The held-out items of one evaluation: the same every time for the same seed and ``eval_items``."""
        # The task name seeds the held-out stream: renaming an environment changes its evaluation items.
        task_name = self.name or type(self).__name__
        config = self.config
        return heldout_items(self.generate_problem, config.eval_items, seed=config.seed, task_name=task_name)

    async def get_next_item(self) -> QAItem:
        return self.train_item()
