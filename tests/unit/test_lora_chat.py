"""LoRA (peft) on a Qwen3 chat model in the local backend: only the adapters train, the checkpoint is a plain model
that ``from_pretrained`` loads and that computes what the trained model computed, a resume restores the adapters,
and the packed pass and the sampler's weights agree with the adapted model."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
import torch
from datums import completion_datum

from hermes_nb.inference.contract import Policy
from hermes_nb.inference.engine import InferenceEngine
from hermes_nb.inference.sampler import SampleRow
from hermes_nb.testing import make_tiny_chat_model
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.types import AdamParams, Datum

torch.set_num_threads(1)

RANK = 4
# Large enough that one step visibly moves the adapters of a random model, small enough to stay stable.
LEARNING_RATE = 1e-2


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_chat_model(tmp_path_factory.mktemp("chat"))


def _group() -> list[Datum]:
    """One prompt, repeated and distinct completions: a batch the packed pass packs."""
    prompt = [1, 40, 41, 42]
    return [
        completion_datum(prompt, [50, 51, 2], 1.0),
        completion_datum(prompt, [50, 51, 2], 1.0),
        completion_datum(prompt, [60, 2], -1.0),
        completion_datum([1, 43, 44], [70, 71, 72, 2], 0.5),
    ]


def _on_policy(backend: LocalBackend, data: list[Datum]) -> list[Datum]:
    logprobs = backend.forward(data)
    return [d.model_copy(update={"sampling_logprobs_T": lp}) for d, lp in zip(data, logprobs, strict=True)]


def _step(backend: LocalBackend, data: list[Datum]) -> float:
    loss = backend.forward_backward(data, "importance_sampling").loss
    backend.optim_step(AdamParams(learning_rate=LEARNING_RATE))
    return loss


def _adapter_and_base(backend: LocalBackend) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    params = {name: p.detach().clone() for name, p in backend.model.named_parameters()}
    adapter = {name: p for name, p in params.items() if "lora_" in name}
    return adapter, {name: p for name, p in params.items() if name not in adapter}


def _logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]


def test_lora_trains_only_the_adapters_and_the_loss_moves(model_dir: Path) -> None:
    backend = LocalBackend(model_dir, lora_rank=RANK)
    adapter_before, base_before = _adapter_and_base(backend)
    assert adapter_before and {n for n, p in backend.model.named_parameters() if p.requires_grad} == set(adapter_before)
    data = _on_policy(backend, _group())
    first = _step(backend, data)
    second = backend.forward_backward(data, "importance_sampling").loss
    adapter_after, base_after = _adapter_and_base(backend)
    assert second < first  # the step lowered the loss of the batch it trained on
    assert all(torch.equal(base_before[name], base_after[name]) for name in base_before)
    assert any(not torch.equal(adapter_before[name], adapter_after[name]) for name in adapter_before)


def test_a_lora_checkpoint_loads_without_peft_and_gives_the_trained_logits(model_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    backend = LocalBackend(model_dir, lora_rank=RANK)
    _step(backend, _on_policy(backend, _group()))
    backend.save_state(tmp_path / "ckpt", {"step": 1})
    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path / "ckpt"))
    assert type(loaded).__name__ == "Qwen3ForCausalLM"
    assert next(loaded.parameters()).dtype == torch.float32
    assert not any("lora" in name for name, _ in loaded.named_parameters())
    backend.model.eval()
    ids = [1, 40, 41, 42, 50, 51]
    trained, base = _logits(backend.model, ids), _logits(AutoModelForCausalLM.from_pretrained(str(model_dir)), ids)
    assert torch.allclose(_logits(loaded, ids), trained, atol=1e-5)
    assert not torch.allclose(base, trained, atol=1e-3)  # the adapters did change the model


def test_resuming_a_lora_checkpoint_restores_the_adapters_and_the_optimizer(model_dir: Path, tmp_path: Path) -> None:
    data = _group()
    backend = LocalBackend(model_dir, lora_rank=RANK)
    data = _on_policy(backend, data)
    _step(backend, data)
    backend.save_state(tmp_path / "ckpt", {"step": 1})
    restored = LocalBackend(model_dir, lora_rank=RANK, seed=1)  # other seed: other initial adapters
    assert restored.load_state(tmp_path / "ckpt") == {"step": 1}
    for (name, a), (_, b) in zip(backend.model.named_parameters(), restored.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name
    losses = [_step(b, data) for b in (backend, restored)]
    assert losses[0] == pytest.approx(losses[1], abs=1e-7)
    for a, b in zip(backend.model.parameters(), restored.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-7)


def test_the_packed_pass_of_a_lora_model_equals_the_plain_one(model_dir: Path) -> None:
    results = []
    for packed in (False, True):
        backend = LocalBackend(model_dir, lora_rank=RANK, pack_batches=packed)
        out = backend.forward_backward(_group(), "ppo")
        grads = torch.cat([p.grad.flatten() for p in backend.model.parameters() if p.grad is not None])
        results.append((out.loss, grads))
    (plain_loss, plain_grad), (packed_loss, packed_grad) = results
    assert packed_loss == pytest.approx(plain_loss, abs=1e-6)
    assert torch.allclose(packed_grad, plain_grad, atol=1e-6)
    assert plain_grad.abs().sum() > 0


def test_the_sampler_gets_the_merged_weights_of_the_adapted_model(model_dir: Path) -> None:
    backend = LocalBackend(model_dir, lora_rank=RANK)
    engine = InferenceEngine()
    sampler = backend.sampler_model()
    engine.publish(Policy(model=sampler, tokenizer=backend.tokenizer, version=0, name="lora"))
    _step(backend, _on_policy(backend, _group()))
    handle = backend.save_weights_for_sampler("step_1")
    assert not any("lora" in key for key in handle.policy)
    engine.publish_weights(handle.policy, 1)
    try:
        row = SampleRow(prompt=[1, 40, 41], max_tokens=3, temperature=0.0)
        (result,), version = asyncio.run(engine.sample([row]))
    finally:
        engine.close()
    assert version == 1
    backend.model.eval()
    ids = [1, 40, 41, *result.token_ids[:-1]]
    assert torch.allclose(_logits(sampler, ids), _logits(backend.model, ids), atol=1e-5)
    assert result.token_ids[0] == int(_logits(backend.model, [1, 40, 41])[-1].argmax())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_weights_handed_to_the_sampler_are_those_of_the_merged_model(model_dir: Path, dtype: str) -> None:
    backend = LocalBackend(model_dir, lora_rank=RANK, device="cpu", dtype=dtype)
    for _ in range(2):  # trained adapters: a merge that dropped them would hand over the base
        _step(backend, _on_policy(backend, _group()))

    handed = backend.save_weights_for_sampler("step_2").policy

    merged = backend.sampler_model().state_dict()  # peft's merge_and_unload of a float32 copy, in the compute dtype
    assert handed.keys() == merged.keys()
    for key, tensor in merged.items():
        assert handed[key].dtype == tensor.dtype, key
        assert torch.equal(handed[key], tensor), key
    base = backend.model.get_base_model().state_dict()
    adapted = {key.replace(".base_layer.", "."): base[key] for key in base if key.endswith(".base_layer.weight")}
    assert adapted and any(
        not torch.equal(handed[key], weight.to(handed[key].dtype)) for key, weight in adapted.items()
    )


def test_a_bfloat16_lora_keeps_its_frozen_base_in_bfloat16_and_trains_float32_adapters(
    model_dir: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    backend = LocalBackend(model_dir, lora_rank=RANK, device="cpu", dtype="bfloat16")
    adapter_before, base_before = _adapter_and_base(backend)
    assert {p.dtype for p in base_before.values()} == {torch.bfloat16}
    assert {p.dtype for p in adapter_before.values()} == {torch.float32}
    assert math.isfinite(_step(backend, _on_policy(backend, _group())))
    assert {t.dtype for t in backend.save_weights_for_sampler("step_1").policy.values()} == {torch.bfloat16}
    backend.save_state(tmp_path / "ckpt", {"step": 1})
    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path / "ckpt"))
    assert loaded.config.dtype == torch.float32
    # Merged in float32: checkpoint = bfloat16 base + the adapters' update, which bfloat16 would mostly round off.
    adapted = backend.model.get_base_model().model.layers[0].self_attn.q_proj
    delta = adapted.get_delta_weight("default")
    merged = loaded.model.layers[0].self_attn.q_proj.weight
    assert delta.abs().max() > 0
    assert torch.allclose(merged, adapted.base_layer.weight.float() + delta, atol=1e-7)
