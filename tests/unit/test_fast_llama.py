"""The lean Llama forward computes what transformers computes: logits with left padding, a KV cache and
grouped-query attention, gradients, and the sampler's outputs; other architectures keep the transformers path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from hermes_nb.inference.fast_llama import FastLlama, select_rows, supports
from hermes_nb.inference.sampler import SampleRow, _FastStepper, _TransformersStepper, generate, left_pad
from hermes_nb.testing import make_tiny_model

torch.set_num_threads(1)

PROMPTS = [[1, 20, 21, 22, 23], [1, 30, 31], [1, 40, 41, 42]]  # different lengths: left padding must not leak


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoModelForCausalLM

    # The test shape has 4 query heads and 2 key/value heads: grouped-query attention is exercised.
    model = AutoModelForCausalLM.from_pretrained(str(make_tiny_model(tmp_path_factory.mktemp("tiny"))))
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    return model.eval()


def test_prefill_logits_equal_the_transformers_forward_on_real_tokens(model: Any) -> None:
    ids, mask, positions = left_pad(PROMPTS, pad_id=0)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        logits, _ = FastLlama(model)(ids, positions, mask)
    real = mask.bool()
    assert torch.allclose(logits[real], expected[real], atol=1e-5)


def test_a_cached_step_on_selected_rows_equals_running_the_whole_sequence(model: Any) -> None:
    ids, mask, positions = left_pad(PROMPTS, pad_id=0)
    rows = torch.tensor([2, 0, 0, 1])  # rows repeat and reorder, as when a prompt is sampled n times
    following = torch.tensor([[50], [51], [52], [53]])
    fast = FastLlama(model)
    with torch.no_grad():
        _, cache = fast(ids, positions, mask)
        step_mask = torch.cat([mask[rows], torch.ones(4, 1, dtype=torch.long)], dim=1)
        step_positions = positions[rows, -1:] + 1
        logits, _ = fast(following, step_positions, step_mask, select_rows(cache, rows))
        whole = model(
            input_ids=torch.cat([ids[rows], following], dim=1),
            attention_mask=step_mask,
            position_ids=torch.cat([positions[rows], step_positions], dim=1),
        ).logits
    assert torch.allclose(logits[:, -1], whole[:, -1], atol=1e-5)


def test_gradients_equal_the_transformers_gradients(model: Any) -> None:
    ids, mask, positions = left_pad(PROMPTS, pad_id=0)
    weights = mask.float()[..., None]  # a loss on real positions only

    def gradient(logits_of: Any) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        (torch.log_softmax(logits_of(), -1) * weights).sum().backward()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    expected = gradient(lambda: model(input_ids=ids, attention_mask=mask, position_ids=positions).logits)
    got = gradient(lambda: FastLlama(model)(ids, positions, mask)[0])
    model.zero_grad(set_to_none=True)
    assert torch.allclose(got, expected, atol=1e-5)


def test_the_sampler_draws_the_same_tokens_through_either_path(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from hermes_nb.inference import sampler

    rows = [SampleRow(prompt=p, max_tokens=6, temperature=1.0, seed=k) for k, p in enumerate(PROMPTS * 3)]
    outputs = {}
    for name, stepper in (("fast", _FastStepper), ("transformers", _TransformersStepper)):
        monkeypatch.setattr(sampler, "stepper_for", stepper)
        outputs[name] = generate(model, rows, pad_id=0, decode=str, generator=torch.Generator().manual_seed(0))
    for fast, slow in zip(outputs["fast"], outputs["transformers"], strict=True):
        assert fast.token_ids == slow.token_ids
        assert fast.logprobs == pytest.approx(slow.logprobs, abs=1e-5)


def test_other_architectures_and_options_keep_the_transformers_path(tmp_path: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    small = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
    assert supports(LlamaForCausalLM(LlamaConfig(vocab_size=40, **small)))
    assert not supports(LlamaForCausalLM(LlamaConfig(vocab_size=40, attention_bias=True, **small)))
    assert not supports(LlamaForCausalLM(LlamaConfig(vocab_size=40, attention_dropout=0.1, **small)))
    scaled = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    assert not supports(LlamaForCausalLM(LlamaConfig(vocab_size=40, rope_parameters=scaled, **small)))
    llama3_base = {"rope_type": "default", "rope_theta": 500000.0}
    model = LlamaForCausalLM(LlamaConfig(vocab_size=40, rope_parameters=llama3_base, **small))
    assert supports(model) and FastLlama(model).inv_freq[1].item() == pytest.approx(500000.0 ** (-2 / 8))
    assert not supports(GPT2LMHeadModel(GPT2Config(vocab_size=40, n_embd=16, n_layer=1, n_head=2)))
