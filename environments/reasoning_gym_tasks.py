"""reasoning-gym's procedural datasets as one environment: one dataset, or a weighted mix of several.

Task: each item is an entry of a reasoning-gym dataset (``reasoning_gym.create_dataset(name, seed=..., size=...,
**params)``), drawn from ``datasets`` by weight; its prompt is ``prompt_template`` with the entry's question in
place of ``{question}``. The file is named ``reasoning_gym_tasks.py``, not ``reasoning_gym.py``, so that it does
not shadow the package it imports.
Reward: the dataset's own ``score_answer`` of the answer extracted from the completion (``extraction``), so a
near miss in format may earn partial credit; only full marks (``score >= 1.0``) count as correct.
Eval: greedy accuracy over ``eval_items`` held-out entries, whose prompts hash into the held-out split
(``hermes_nb.env.splits``) and are therefore never training items; reported as ``eval/percent_correct``.
Needs the ``reasoning-gym`` package (``pip install 'hermes-nb[environments]'``).
"""

from __future__ import annotations

import difflib
import functools
import math
import random
import re
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from hermes_nb.env import BaseEnvConfig, QAEnv, QAItem

if TYPE_CHECKING:
    from reasoning_gym.dataset import ProceduralDataset

INSTALL_HINT = "pip install 'hermes-nb[environments]' (or: pip install reasoning-gym==0.1.25)"
# Dataset names shown when one is refused: enough to see the naming, short enough for one line.
NAMES_SHOWN = 8
# Parameters the environment sets itself: every entry is seeded by ``seed`` and indexed below ``dataset_size``.
OWN_PARAMS = ("seed", "size")

Extraction = Literal["last_line", "answer_prefix", "answer_tag"]
ANSWER_PREFIX = "Answer:"
ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def package() -> ModuleType:
    """The reasoning_gym package, imported on first use; a clear error naming the install command when missing."""
    try:
        import reasoning_gym
    except ImportError as exc:
        raise ImportError(f"the reasoning_gym environment needs the reasoning-gym package: {INSTALL_HINT}") from exc
    return reasoning_gym


def dataset_registry() -> dict[str, Any]:
    """reasoning-gym's datasets by name."""
    datasets: dict[str, Any] = package().factory.DATASETS
    # "composite" mixes other datasets; this environment's ``datasets`` weights are that mix.
    return {name: spec for name, spec in datasets.items() if name != "composite"}


def unknown_dataset(name: str, known: list[str]) -> str:
    """The refusal of ``name``: the known names most like it first, then the first few of all."""
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    shown = [*close, *(n for n in known if n not in close)][:NAMES_SHOWN]
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    return f"unknown dataset {name!r}{hint}; {len(known)} are known, e.g. {', '.join(shown)}, ..."


def extract_answer(text: str, rule: Extraction) -> str | None:
    """The answer part of a completion by ``rule``; None when the completion has none (scored 0 by every dataset)."""
    if rule == "answer_tag":
        matches = ANSWER_TAG.findall(text)
        return matches[-1].strip() if matches else None
    if rule == "answer_prefix":
        _, found, tail = text.rpartition(ANSWER_PREFIX)
        return tail.strip() if found else None
    lines = [line.strip() for line in text.strip().splitlines()]
    return lines[-1] if lines and lines[-1] else None


class ReasoningGymConfig(BaseEnvConfig):
    # reasoning-gym's questions are sentences, not "12+34=": twice the base default, which is also every position
    # the embedded base model has (a larger model wants more for the longer datasets).
    max_token_length: int = Field(default=128, ge=8, le=32768, description="Longest sequence (prompt + completion).")
    datasets: dict[str, float] = Field(
        default={"chain_sum": 1.0},
        description="reasoning-gym datasets by name, each with its weight in the mix (positive; need not sum to 1).",
    )
    dataset_params: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Each dataset's own parameters by its name, e.g. {chain_sum: {max_terms: 2}} (not seed or size).",
    )
    dataset_size: int = Field(
        default=10_000,
        ge=10,
        le=20_000,  # word_ladder, for one, refuses more
        description="Entries per dataset that items are drawn from (a tenth are held out for evaluation).",
    )
    prompt_template: str = Field(
        default="{question}\nAnswer:",
        description="The prompt: the entry's question in place of {question} (no other braces).",
    )
    # A completion ends at its first newline (QAEnv stops there), so the default prompt ends with "Answer:" and
    # the completion is the answer: its last line, which is also what a model that writes lines of working
    # before the answer ends with. answer_prefix and answer_tag suit templates that ask for those markers.
    extraction: Extraction = Field(
        default="last_line",
        description=(
            "What is scored: last_line (the completion's last line), answer_prefix (the text after the last "
            "'Answer:'), or answer_tag (the last <answer>...</answer>, reasoning-gym's own format)."
        ),
    )
    max_completion_tokens: int = Field(
        default=16, ge=1, le=32768, description="Longest completion, in tokens (the end-of-sequence one included)."
    )

    @field_validator("datasets")
    @classmethod
    def _known_datasets_with_positive_weights(cls, datasets: dict[str, float]) -> dict[str, float]:
        if not datasets:
            raise ValueError("name at least one reasoning-gym dataset, e.g. {chain_sum: 1.0}")
        known = dataset_registry()
        for name, weight in datasets.items():
            if name not in known:
                raise ValueError(unknown_dataset(name, sorted(known)))
            if not (math.isfinite(weight) and weight > 0):
                raise ValueError(f"the weight of {name!r} must be a positive number (got {weight})")
        return datasets

    @field_validator("prompt_template")
    @classmethod
    def _template_takes_the_question(cls, template: str) -> str:
        if "{question}" not in template:
            raise ValueError("must contain {question}, where the entry's question goes")
        try:
            template.format(question="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"only {{question}} may be in braces (write {{{{ for a brace): {exc}") from None
        return template

    @model_validator(mode="after")
    def _params_build_their_datasets(self) -> ReasoningGymConfig:
        for name, params in self.dataset_params.items():
            if name not in self.datasets:
                raise ValueError(f"dataset_params.{name}: {name!r} is not in datasets ({', '.join(self.datasets)})")
            own = [key for key in OWN_PARAMS if key in params]
            if own:
                raise ValueError(
                    f"dataset_params.{name}: {', '.join(own)} is set by the environment (seed, dataset_size)"
                )
        for name in self.datasets:
            try:
                make_dataset(self, name)
            except (TypeError, ValueError, AssertionError) as exc:
                raise ValueError(f"dataset_params.{name}: reasoning-gym refused them: {exc}") from None
        return self


def make_dataset(config: ReasoningGymConfig, name: str) -> ProceduralDataset:
    params = config.dataset_params.get(name, {})
    dataset: ProceduralDataset = package().create_dataset(name, seed=config.seed, size=config.dataset_size, **params)
    return dataset


class ReasoningGymEnv(QAEnv):
    name = "reasoning_gym"
    env_config_cls = ReasoningGymConfig
    config: ReasoningGymConfig

    @functools.cached_property
    def datasets(self) -> dict[str, ProceduralDataset]:
        """Each configured dataset, built once: an entry is a function of (seed, index), so items repeat by seed."""
        return {name: make_dataset(self.config, name) for name in self.config.datasets}

    def generate_problem(self, rng: random.Random) -> QAItem:
        names = list(self.config.datasets)
        [name] = rng.choices(names, weights=[self.config.datasets[n] for n in names])
        index = rng.randrange(self.config.dataset_size)
        entry = self.entry(name, index)
        prompt = self.config.prompt_template.format(question=entry["question"])
        # The item names its entry, which scoring reads back: score_answer needs the entry, not just the answer.
        return QAItem(prompt=prompt, answer=str(entry["answer"]), metadata={"dataset": name, "index": index})

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one environment per process; a group scores one entry N times
    def entry(self, name: str, index: int) -> dict[str, Any]:
        """The dataset's entry ``index``: question, answer and the metadata its ``score_answer`` reads."""
        entry: dict[str, Any] = self.datasets[name][index]
        return entry

    @functools.cached_property
    def heldout(self) -> list[QAItem]:
        """The held-out items, made once: a slow generator (zebra_puzzles: ~0.1 s an entry) times the ~10 entries
        drawn per held-out item made every evaluation minutes long."""
        return super().eval_items()

    def eval_items(self) -> list[QAItem]:
        return list(self.heldout)

    def score_item(self, text: str, item: QAItem) -> float:
        """reasoning-gym's own score of the answer extracted from ``text`` (partial credit allowed)."""
        name, index = item.metadata["dataset"], item.metadata["index"]
        answer = extract_answer(text, self.config.extraction)
        return float(self.datasets[name].score_answer(answer=answer, entry=self.entry(name, index)))

    def max_completion_tokens(self) -> int:
        return self.config.max_completion_tokens


if __name__ == "__main__":
    ReasoningGymEnv.cli()
