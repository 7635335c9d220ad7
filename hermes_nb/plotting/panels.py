"""The panels the metrics figure can draw, by name, and the four it draws unless told otherwise.

The default four follow what people watch while comparing RL algorithms (the loss is not a progress signal: its
value depends on the advantages' normalisation, so it is one ``panels=`` name away, not a default panel): the
reward of the trained batch with a smoothed line and its group spread as a band, held-out accuracy, completion
length (mean, max as a thin line) and the KL to the reference, or the policy's entropy on a run without one.

A panel whose key no run has logged yet draws its ``fallback`` (a KL panel on a run without a reference shows
entropy; a trainer that logs no completion length yet shows the environment's count), and one with neither says
so in its axes instead of drawing an empty frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hermes_nb.errors import HermesNBError
from hermes_nb.protocol.metrics import (
    ENV_COMPLETION_TOKENS_MEAN,
    EVAL_PERCENT_CORRECT,
    TRAIN_CLIP_FRACTION_HIGH,
    TRAIN_CLIP_FRACTION_LOW,
    TRAIN_COMPLETION_LENGTH,
    TRAIN_COMPLETION_LENGTH_MAX,
    TRAIN_ENTROPY,
    TRAIN_KL,
    TRAIN_LEARNING_RATE,
    TRAIN_LOSS,
    TRAIN_PERCENT_CORRECT,
    TRAIN_REWARD_MAX,
    TRAIN_REWARD_MEAN,
    TRAIN_REWARD_MIN,
    TRAIN_REWARD_STD,
    TRAIN_TEACHER_KL,
)

# The figure is a 2 x 2 grid (background.py's cells).
PANEL_COUNT = 4


@dataclass(frozen=True)
class Panel:
    """One panel: ``key`` as a line; ``band_key`` a band of ``key`` +- it; ``thin_key`` a second, thin line;
    ``smoothed``: a smoothed line over the raw one even when the figure is drawn unsmoothed; ``band_range``: the
    keys of the lowest and highest single value behind ``key`` (the band stays between them)."""

    title: str
    key: str
    band_key: str | None = None
    band_range: tuple[str, str] | None = None
    thin_key: str | None = None
    smoothed: bool = False
    fallback: Panel | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key this panel (and its fallbacks) may draw."""
        own = tuple(key for key in (self.key, self.band_key, self.thin_key) if key is not None)
        return own + (self.band_range or ()) + (self.fallback.keys if self.fallback is not None else ())


ENTROPY = Panel("Entropy", TRAIN_ENTROPY)
PANEL_CHOICES: dict[str, Panel] = {
    "reward": Panel(
        "Reward (mean ± group std)",
        TRAIN_REWARD_MEAN,
        band_key=TRAIN_REWARD_STD,
        band_range=(TRAIN_REWARD_MIN, TRAIN_REWARD_MAX),
        smoothed=True,
    ),
    "eval": Panel("Held-out accuracy", EVAL_PERCENT_CORRECT),
    "length": Panel(
        "Completion length (tokens; max thin)",
        TRAIN_COMPLETION_LENGTH,
        thin_key=TRAIN_COMPLETION_LENGTH_MAX,
        fallback=Panel("Completion length (tokens, sampled)", ENV_COMPLETION_TOKENS_MEAN),
    ),
    "kl": Panel("KL to the reference", TRAIN_KL, fallback=ENTROPY),
    "entropy": ENTROPY,
    "loss": Panel("Loss", TRAIN_LOSS),
    "train_correct": Panel("Percent correct (train)", TRAIN_PERCENT_CORRECT),
    "clip_fraction": Panel(
        "Clip fraction (low; high thin)", TRAIN_CLIP_FRACTION_LOW, thin_key=TRAIN_CLIP_FRACTION_HIGH
    ),
    "learning_rate": Panel("Learning rate", TRAIN_LEARNING_RATE),
    "teacher_kl": Panel("Reverse KL to the teacher (per token)", TRAIN_TEACHER_KL),
}
DEFAULT_PANELS = ("reward", "eval", "length", "kl")
PANELS = tuple(PANEL_CHOICES[name] for name in DEFAULT_PANELS)
# Every key any panel may draw: what the series keep and a W&B source reads, so switching panels needs no re-read.
PLOTTED_KEYS = tuple(dict.fromkeys(key for panel in PANEL_CHOICES.values() for key in panel.keys))


def resolve_panels(names: Sequence[str] | None) -> tuple[Panel, ...]:
    """The panels named (None: the default four); anything else is refused, naming what is accepted."""
    if names is None:
        return PANELS
    names = list(names)
    unknown = [name for name in names if name not in PANEL_CHOICES]
    if unknown or len(names) != PANEL_COUNT:
        raise HermesNBError(
            f"panels must be {PANEL_COUNT} names of: {', '.join(PANEL_CHOICES)}; got {names}"
            + (f" ({', '.join(unknown)} unknown)" if unknown else "")
        )
    return tuple(PANEL_CHOICES[name] for name in names)
