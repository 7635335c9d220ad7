"""The lean forward computes what transformers computes, for Llama and Qwen3: logits with left padding, cached
decoding steps and grouped-query attention, gradients through the cache, the sampler's outputs, activation
checkpointing, the parameters' own dtype and device; other architectures and options keep the transformers path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from hermes_nb.inference.fast_forward import FastForward, select_rows, supports
from hermes_nb.inference.sampler import SampleRow, _FastStepper, _TransformersStepper, generate, left_pad, stepper_for
from hermes_nb.testing import make_tiny_model

torch.set_num_threads(1)

PROMPTS = [[1, 20, 21, 22, 23], [1, 30, 31], [1, 40, 41, 42]]  # different lengths: left padding must not leak
ROWS = torch.tensor([2, 0, 0, 1])  # rows repeat and reorder, as when a prompt is sampled n times
FOLLOWING = torch.tensor([[50, 60, 70], [51, 61, 71], [52, 62, 72], [53, 63, 73]])  # [R, S] continuation tokens
# [R, 8]: decoding past twice the prompt's width makes the cache's buffers grow.
DECODED = 50 + (torch.arange(8)[None, :] * 5 + torch.arange(4)[:, None]) % 45
# Query heads 4, key/value heads 2 (grouped-query attention), head_dim 16 != hidden / heads (Qwen3 decouples them).
QWEN3_SHAPE = {
    "vocab_size": 100,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}


def qwen3(seed: int = 0, **options: Any) -> Any:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _perturbed(Qwen3ForCausalLM(Qwen3Config(**QWEN3_SHAPE, **options)))


def _perturbed(model: Any) -> Any:
    """Norm weights start at one and biases at zero: randomise them, so mixing up q_norm and k_norm, or
    dropping a bias, changes the logits."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.uniform_(0.5, 1.5)
            elif name.endswith(".bias"):
                parameter.normal_(0.0, 0.1)
    return model.eval()


@pytest.fixture(scope="module", params=["llama", "qwen3", "qwen3_attention_bias", "llama_attention_bias"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    if request.param.startswith("qwen3"):
        model = qwen3(attention_bias=request.param.endswith("bias"))
    else:
        path = make_tiny_model(tmp_path_factory.mktemp("tiny"))
        if request.param.endswith("bias"):
            config = AutoModelForCausalLM.from_pretrained(str(path)).config
            config.attention_bias = True
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                model = _perturbed(LlamaForCausalLM(config))
        else:
            model = _perturbed(AutoModelForCausalLM.from_pretrained(str(path)))
    assert supports(model) and model.config.num_key_value_heads < model.config.num_attention_heads
    return model


def _reference_logits(model: Any, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, attention_mask=mask, position_ids=positions).logits


def test_prefill_logits_equal_the_transformers_forward_on_real_tokens(model: Any) -> None:
    ids, mask, positions = left_pad(PROMPTS, pad_id=0)
    with torch.no_grad():
        expected = _reference_logits(model, ids, mask, positions)
        logits, _ = FastForward(model)(ids, positions, mask)
    real = mask.bool()
    assert torch.allclose(logits[real], expected[real], atol=1e-5)


def test_cached_decoding_steps_on_selected_rows_equal_running_the_whole_sequence(model: Any) -> None:
    ids, mask, positions = left_pad(PROMPTS, pad_id=0)
    fast = FastForward(model)
    with torch.no_grad():
        _, cache = fast(ids, positions, mask)
        cache = select_rows(cache, ROWS)
        step_mask, step_positions = mask[ROWS], positions[ROWS]
        for step in range(DECODED.shape[1]):  # one token per call, as the sampler decodes
            step_mask = torch.cat([step_mask, torch.ones(len(ROWS), 1, dtype=torch.long)], dim=1)
            step_positions = torch.cat([step_positions, step_positions[:, -1:] + 1], dim=1)
            logits, cache = fast(DECODED[:, step : step + 1], step_positions[:, -1:], step_mask, cache)
            whole_ids = torch.cat([ids[ROWS], DECODED[:, : step + 1]], dim=1)
            whole = _reference_logits(model, whole_ids, step_mask, step_positions)
            assert torch.allclose(logits[:, -1], whole[:, -1], atol=1e-5), step


def test_gradients_through_the_cache_equal_the_transformers_gradients(model: Any) -> None:
    """The packed training pass: prompts once into the cache, each row's continuation on top of it."""
    ids, mask, positions = left_pad(PROMPTS, pad_id=0)
    whole_mask = torch.cat([mask[ROWS], torch.ones_like(FOLLOWING)], dim=1)
    following_positions = positions[ROWS, -1:] + 1 + torch.arange(FOLLOWING.shape[1])

    def gradient(continuation_logits: Any) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        torch.log_softmax(continuation_logits(), -1).sum().backward()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    def fast() -> torch.Tensor:
        forward = FastForward(model)
        _, cache = forward(ids, positions, mask)
        return forward(FOLLOWING, following_positions, whole_mask, select_rows(cache, ROWS))[0]

    def whole() -> torch.Tensor:
        whole_ids = torch.cat([ids[ROWS], FOLLOWING], dim=1)
        whole_positions = torch.cat([positions[ROWS], following_positions], dim=1)
        return _reference_logits(model, whole_ids, whole_mask, whole_positions)[:, -FOLLOWING.shape[1] :]

    expected, got = gradient(whole), gradient(fast)
    model.zero_grad(set_to_none=True)
    assert expected.abs().sum() > 0
    assert torch.allclose(got, expected, atol=1e-5)


def test_gradients_flow_through_several_cached_calls() -> None:
    """Under autograd the cache is never written in place: a later call would change what an earlier one saved."""
    model = qwen3()
    ids, mask, positions = left_pad(PROMPTS, pad_id=0)
    whole_mask = torch.cat([mask, torch.ones(len(PROMPTS), 2, dtype=torch.long)], dim=1)
    following, following_positions = FOLLOWING[:3, :2], positions[:, -1:] + 1 + torch.arange(2)

    def gradient(fast: bool) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        if fast:
            forward = FastForward(model)
            _, cache = forward(ids, positions, mask)
            first, cache = forward(following[:, :1], following_positions[:, :1], whole_mask[:, :-1], cache)
            second, _ = forward(following[:, 1:], following_positions[:, 1:], whole_mask, cache)
            logits = torch.cat([first, second], dim=1)
        else:
            whole_positions = torch.cat([positions, following_positions], dim=1)
            whole_ids = torch.cat([ids, following], dim=1)
            logits = _reference_logits(model, whole_ids, whole_mask, whole_positions)[:, -2:]
        torch.log_softmax(logits, -1).sum().backward()
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    assert torch.allclose(gradient(fast=True), gradient(fast=False), atol=1e-5)


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


def _cached_pass_gradient(model: Any) -> torch.Tensor:
    ids, mask, positions = left_pad(PROMPTS, pad_id=0)
    model.zero_grad(set_to_none=True)
    forward = FastForward(model)
    _, cache = forward(ids, positions, mask)
    whole_mask = torch.cat([mask[ROWS], torch.ones_like(FOLLOWING)], dim=1)
    following_positions = positions[ROWS, -1:] + 1 + torch.arange(FOLLOWING.shape[1])
    logits, _ = forward(FOLLOWING, following_positions, whole_mask, select_rows(cache, ROWS))
    torch.log_softmax(logits, -1).sum().backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def test_activation_checkpointing_keeps_the_cache_and_the_gradients() -> None:
    plain, checkpointed = qwen3().train(), qwen3().train()
    checkpointed.activation_checkpointing_enable()
    assert checkpointed.is_activation_checkpointing
    expected = _cached_pass_gradient(plain)
    got = _cached_pass_gradient(checkpointed)
    assert torch.allclose(got, expected, atol=1e-6)


def test_the_forward_runs_in_the_parameters_dtype() -> None:
    full, half = qwen3(), qwen3().to(torch.bfloat16)
    ids, mask, positions = left_pad(PROMPTS, pad_id=0)
    real = mask.bool()
    with torch.no_grad():
        logits, cache = FastForward(half)(ids, positions, mask)
        expected = _reference_logits(half, ids, mask, positions)
        reference = FastForward(full)(ids, positions, mask)[0]
    assert logits.dtype == cache[0].keys.dtype == torch.bfloat16
    # Logits here are below 0.5, where bfloat16's step is 2e-3 (8 bits of mantissa).
    assert torch.allclose(logits[real].float(), expected[real].float(), atol=4e-3)
    assert torch.allclose(logits[real].float(), reference[real], atol=1e-2)


def test_under_autocast_it_computes_what_transformers_computes() -> None:
    """The trainer keeps float32 weights and computes in bfloat16 under autocast."""
    model = qwen3()
    ids, mask, positions = left_pad(PROMPTS, pad_id=0)
    real = mask.bool()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits, _ = FastForward(model)(ids, positions, mask)
        expected = _reference_logits(model, ids, mask, positions)
    assert logits.dtype == expected.dtype == torch.bfloat16
    assert torch.allclose(logits[real].float(), expected[real].float(), atol=4e-3)


def test_every_tensor_it_makes_lives_on_the_parameters_device() -> None:
    """On the meta device a tensor made on the CPU (a mask, the RoPE angles) fails the call, as it would on CUDA."""
    model = qwen3().to("meta")
    ids, mask, positions = (t.to("meta") for t in left_pad(PROMPTS, pad_id=0))
    with torch.no_grad():
        logits, cache = FastForward(model)(ids, positions, mask)
    assert logits.device.type == cache[0].keys.device.type == "meta"
    assert logits.shape == (3, 5, QWEN3_SHAPE["vocab_size"])


def test_unsupported_configs_keep_the_transformers_path(tmp_path: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    scaled = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    unsupported = [
        qwen3(use_sliding_window=True, sliding_window=4, max_window_layers=1),  # layer 2 slides
        qwen3(rope_parameters=scaled),
        qwen3(attention_dropout=0.1),
        qwen3(hidden_act="gelu"),
        LlamaForCausalLM(LlamaConfig(vocab_size=40, mlp_bias=True, **_small_llama())),
        LlamaForCausalLM(LlamaConfig(vocab_size=40, attention_dropout=0.1, **_small_llama())),
        LlamaForCausalLM(LlamaConfig(vocab_size=40, rope_parameters=scaled, **_small_llama())),
        GPT2LMHeadModel(GPT2Config(vocab_size=40, n_embd=16, n_layer=1, n_head=2)),
    ]
    for model in unsupported:
        assert not supports(model), model.config
        assert isinstance(stepper_for(model), _TransformersStepper)
        with pytest.raises(ValueError, match="transformers forward"):
            FastForward(model)
    # A sliding window that covers no layer is full attention everywhere.
    assert supports(qwen3(use_sliding_window=True, sliding_window=4, max_window_layers=2))
    assert isinstance(stepper_for(qwen3()), _FastStepper)


def _small_llama() -> dict[str, int]:
    return {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}


def test_a_non_default_rope_base_is_read_from_the_config() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    llama3_base = {"rope_type": "default", "rope_theta": 500000.0}
    model = LlamaForCausalLM(LlamaConfig(vocab_size=40, rope_parameters=llama3_base, **_small_llama()))
    assert supports(model) and FastForward(model).inv_freq[1].item() == pytest.approx(500000.0 ** (-2 / 8))
