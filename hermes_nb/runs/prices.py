"""The user's price table (``<hermes home>/prices.yaml``) and what tokens cost by it: read by the pre-run
estimate (``estimate.py``), by the supervisor's cost meter (``supervision/cost_meter.py``), so the estimate and the
recorded cost of a run are priced by the same entry and the same arithmetic, and by the hosted model tests
(``model_test/runner.py``).

hermes-nb ships no prices: a price is the user's, with the source and date they read it from, and a model without
an entry has no price ("no price known"), never a made-up one. A local run has none: its machine is the user's.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from hermes_nb.config import RunConfig
from hermes_nb.errors import ConfigError
from hermes_nb.system import home

PRICES_FILE = "prices.yaml"
TOKENS_PER_PRICE_UNIT = 1e6  # prices are per million tokens, as the providers quote them


class Price(BaseModel):
    """One model's entry of the user's price table: US dollars per million tokens, with where it came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sample_per_million_tokens: float  # a token sampled: Tinker's sampling, a hosted model's output
    train_per_million_tokens: float
    source: str
    date: str
    # A hosted model's prompt (input) tokens, where the provider prices them apart; else they count as sampled.
    prompt_per_million_tokens: float | None = None

    def dollars(self, sampled: int, trained: int) -> float:
        """What ``sampled`` tokens sampled and ``trained`` tokens trained cost by this entry."""
        return (
            sampled / TOKENS_PER_PRICE_UNIT * self.sample_per_million_tokens
            + trained / TOKENS_PER_PRICE_UNIT * self.train_per_million_tokens
        )

    def hosted_dollars(self, prompt: int, completion: int) -> float:
        """What a hosted model's ``usage`` (prompt and completion tokens) costs by this entry."""
        prompt_price = self.sample_per_million_tokens
        if self.prompt_per_million_tokens is not None:
            prompt_price = self.prompt_per_million_tokens
        return (prompt * prompt_price + completion * self.sample_per_million_tokens) / TOKENS_PER_PRICE_UNIT

    def described(self) -> str:
        return f"{prices_path()}: {self.source}, {self.date}"


def prices_path() -> Path:
    return home.home_dir() / PRICES_FILE


def price_of(model: str) -> Price | None:
    """``model``'s entry of the user's table; None without a table or an entry. A malformed entry is refused
    naming the file and the model."""
    path = prices_path()
    if not path.is_file():
        return None
    try:
        table = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        entry = table.get(model) if isinstance(table, dict) else None
        return Price.model_validate(entry) if entry is not None else None
    except (yaml.YAMLError, ValidationError) as exc:
        raise ConfigError(f"{path}: {model}: {exc}") from None


def run_price(config: RunConfig) -> Price | None:
    """The entry a run is priced by: its base model's, for a backend that bills (Tinker); a local run has none."""
    if config.trainer.backend == "local":
        return None
    return price_of(config.trainer.base_model)


def no_price(config: RunConfig) -> str:
    """Why a run has no price, as the estimate and the cost say it."""
    if config.trainer.backend == "local":
        return "a local run: no price applies"
    return f"no price known for {config.trainer.base_model}: add it to {prices_path()}"
