"""The sampler runs the model once per distinct prefix, and every row still gets what it would get alone."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import torch

from hermes_nb.inference import sampler
from hermes_nb.inference.sampler import RowResult, SampleRow, generate
from hermes_nb.system.home import embedded_base_model_dir

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def base() -> tuple[Any, Any]:
    """The shipped base model: trained, so its samples share first tokens as a real policy's do."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = str(embedded_base_model_dir())
    return AutoModelForCausalLM.from_pretrained(directory).eval(), AutoTokenizer.from_pretrained(directory)


def prompt(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text)["input_ids"])


def sample(model: Any, tokenizer: Any, rows: list[SampleRow]) -> list[RowResult]:
    decode = lambda ids: str(tokenizer.decode(ids, skip_special_tokens=True))  # noqa: E731
    return generate(model, rows, pad_id=0, decode=decode, generator=torch.Generator().manual_seed(0))


def group_rows(tokenizer: Any) -> list[SampleRow]:
    """Two groups of seeded rows (16 and 8 of one prompt each), a greedy row, and a row with its own top-p."""
    first, second = prompt(tokenizer, "23+45="), prompt(tokenizer, "61+17=")
    rows = [SampleRow(prompt=first, max_tokens=5, stop_strings=("\n",), seed=k) for k in range(16)]
    rows += [SampleRow(prompt=second, max_tokens=5, stop_strings=("\n",), seed=100 + k) for k in range(8)]
    rows.append(SampleRow(prompt=second, max_tokens=5, temperature=0.0, stop_strings=("\n",)))
    rows.append(SampleRow(prompt=first, max_tokens=5, top_p=0.8, stop_strings=("\n",), seed=7))
    return rows


def test_each_row_sampled_with_others_gets_the_tokens_and_logprobs_it_gets_alone(base: tuple[Any, Any]) -> None:
    model, tokenizer = base
    rows = group_rows(tokenizer)

    together = sample(model, tokenizer, rows)
    alone = [sample(model, tokenizer, [row])[0] for row in rows]

    for with_others, by_itself in zip(together, alone, strict=True):
        assert with_others.token_ids == by_itself.token_ids
        assert with_others.logprobs == pytest.approx(by_itself.logprobs, abs=1e-5)
        assert with_others.finish_reason == by_itself.finish_reason


REAL_STEPPER_FOR = sampler.stepper_for


class CountingStepper:
    """The real stepper, counting the rows of each decoding call (``rows_per_call`` of the last one made)."""

    rows_per_call: ClassVar[list[int]] = []

    def __init__(self, model: Any) -> None:
        self.inner = REAL_STEPPER_FOR(model)
        self.prefill = self.inner.prefill
        self.select = self.inner.select
        CountingStepper.rows_per_call = []

    def extend(self, ids_BT: torch.Tensor, mask_BK: torch.Tensor, positions_BT: torch.Tensor) -> torch.Tensor:
        self.rows_per_call.append(ids_BT.shape[0])
        return self.inner.extend(ids_BT, mask_BK, positions_BT)


def test_each_decoding_step_runs_one_row_per_distinct_prefix(
    base: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tokenizer = base
    monkeypatch.setattr(sampler, "stepper_for", CountingStepper)
    rows = group_rows(tokenizer)

    results = sample(model, tokenizer, rows)
    calls = CountingStepper.rows_per_call

    # Step t feeds the t-th sampled token of every row that samples another one after it.
    distinct = [
        len({(tuple(row.prompt), tuple(r.token_ids[: t + 1])) for row, r in zip(rows, results, strict=True)
             if len(r.token_ids) > t + 1})
        for t in range(len(calls))
    ]  # fmt: skip
    assert calls == distinct
    assert sum(calls) < sum(len(r.token_ids) - 1 for r in results)  # fewer rows than one per sample


def test_identical_greedy_rows_decode_as_one(base: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    model, tokenizer = base
    monkeypatch.setattr(sampler, "stepper_for", CountingStepper)
    rows = [SampleRow(prompt=prompt(tokenizer, "12+34="), max_tokens=4, temperature=0.0)] * 16

    results = sample(model, tokenizer, rows)

    assert len({tuple(r.token_ids) for r in results}) == 1
    assert CountingStepper.rows_per_call == [1] * (len(results[0].token_ids) - 1)
