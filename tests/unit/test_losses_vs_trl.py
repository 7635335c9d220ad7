"""Each loss variant of ``hermes_nb.trainer.step.losses``, run by the local backend, against TRL 1.16.0's
``GRPOTrainer.compute_loss`` on the same model, tokens and logprobs: the loss value, the gradient of every
parameter and TRL's logged diagnostics (entropy, KL, clip fractions) agree to float32 rounding, on completions of
uneven lengths and on a packed batch (shared prompts, repeated completions). Measured over every case: loss within
4e-7, gradients within 3e-7 absolute (the largest gradient entries are 0.1 to 0.6); asserted at rtol 1e-5, atol 1e-6.
TRL 1.16 multiplies the KL term by the importance ratio by default (``use_bias_correction_kl``, DeepSeek-V3.2);
hermes-nb's KL term is GRPO's plain one, so TRL runs with that switched off.

TRL's side is fed the tensors its ``_generate_and_score_completions`` produces: left-padded prompts,
right-padded completions and their mask, one advantage per sequence, ``old_per_token_logps`` (our sampling
logprobs: the ratio's denominator), ``ref_per_token_logps`` and ``num_items_in_batch``. The model is in eval mode
so that TRL divides by nothing for gradient accumulation (a batch here is one accumulation window).

Truncated importance sampling: TRL applies it only with ``use_vllm`` (its weight multiplies each token's loss),
which needs a vLLM server. So its weight is computed here by TRL's formula (``token_truncate`` mode, copied from
``_generate_and_score_completions``) and folded into per-token advantages, which TRL accepts as ``[B, T]``: for a
positive weight ``w``, ``-min(r A w, clip(r) A w) = w * -min(r A, clip(r) A)``, the same loss it computes with
``use_vllm``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from ci import skip_or_fail

from hermes_nb.config import embedded_base_model_dir
from hermes_nb.testing import TOKENIZER_FILES
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.local.packing import can_pack, pack
from hermes_nb.trainer.types import Datum, LossConfig

try:
    import trl
except ImportError:  # the fixtures skip, or fail in CI (tests.ci)
    trl = None

torch.set_num_threads(1)

RTOL, ATOL = 1e-5, 1e-6
MAX_COMPLETION_LENGTH = 6
PAD = 0


@dataclass(frozen=True)
class Variant:
    """One algorithm, as hermes-nb's loss settings and as TRL's GRPOConfig fields."""

    loss_fn: str
    loss: LossConfig
    trl_args: dict[str, Any]


def _variant(loss_fn: str, trl_loss_type: str, **loss: Any) -> Variant:
    config = LossConfig(max_completion_length=MAX_COMPLETION_LENGTH, **loss)
    args = {
        "loss_type": trl_loss_type,
        "epsilon": config.clip_epsilon_low,
        "epsilon_high": config.clip_epsilon_high,
        "importance_sampling_level": config.importance_sampling_level,
        "beta": config.beta,
        # TRL 1.16's default multiplies the KL by the importance ratio (DeepSeek-V3.2); ours is GRPO's plain term.
        "use_bias_correction_kl": False,
    }
    return Variant(loss_fn, config, args)


VARIANTS = {
    "ppo-dapo": _variant("ppo", "dapo", loss_type="dapo"),
    "ppo-bnpo": _variant("ppo", "bnpo", loss_type="bnpo"),
    "ppo-grpo": _variant("ppo", "grpo", loss_type="grpo"),
    "ppo-dr_grpo": _variant("ppo", "dr_grpo", loss_type="dr_grpo"),
    "gspo": _variant("ppo", "grpo", loss_type="grpo", importance_sampling_level="sequence"),
    "clip-higher": _variant("ppo", "dapo", clip_epsilon_low=0.2, clip_epsilon_high=0.28),
    "cispo": _variant("cispo", "cispo", clip_epsilon_high=1.1),
    "kl-k3": _variant("ppo", "dapo", beta=0.05, kl_estimator="k3"),
    "tis": _variant("ppo", "dapo", importance_sampling_cap=1.2),
    "tis-cispo-kl": _variant("cispo", "cispo", clip_epsilon_high=1.1, importance_sampling_cap=1.2, beta=0.05),
    # An unclipped surrogate is ppo whose clip range never binds (ratios are positive and below 1e6).
    "importance_sampling": Variant(
        "importance_sampling",
        LossConfig(max_completion_length=MAX_COMPLETION_LENGTH),
        {"loss_type": "dapo", "epsilon": 1e6, "epsilon_high": 1e6},
    ),
}


@dataclass(frozen=True)
class Sample:
    prompt: list[int]
    completion: list[int]
    advantage: float


def uneven_batch() -> list[Sample]:
    """Distinct prompts of different lengths, completions of 1 to MAX_COMPLETION_LENGTH tokens."""
    rng = random.Random(3)
    samples = []
    for i in range(6):
        prompt = [1] + [rng.randrange(10, 90) for _ in range(2 + i % 3)]
        completion = [rng.randrange(10, 90) for _ in range(1 + (i * 5) % MAX_COMPLETION_LENGTH)]
        samples.append(Sample(prompt, completion, advantage=rng.uniform(-1.5, 1.5)))
    return samples


def grouped_batch() -> list[Sample]:
    """Two groups of four sharing their prompt, with repeated completions (one advantage per completion)."""
    first, second = [1, 30, 31, 32], [1, 40, 41]
    return [
        Sample(first, [50, 51, 2], 1.0),
        Sample(first, [50, 51, 2], 1.0),
        Sample(first, [52, 2], -0.5),
        Sample(first, [53, 54, 55, 56, 2], -1.5),
        Sample(second, [60, 2], 0.8),
        Sample(second, [60, 2], 0.8),
        Sample(second, [61, 62, 63, 2], 0.3),
        Sample(second, [50, 51, 2], -1.9),
    ]


@dataclass(frozen=True)
class Scored:
    """A sample with the logprobs of its completion tokens: sampling, the trainer's before the step, reference."""

    sample: Sample
    sampling: list[float]
    old: list[float]
    reference: list[float]


def scored(samples: list[Sample], current: list[list[float]]) -> list[Scored]:
    """Logprobs near the model's own (so some ratios clip and some do not); equal samples get equal values."""
    out = []
    for sample, logprobs in zip(samples, current, strict=True):
        rng = random.Random(hash((tuple(sample.prompt), tuple(sample.completion))))
        mine = logprobs[len(sample.prompt) - 1 :]

        def near(spread: float, values: list[float] = mine, rng: random.Random = rng) -> list[float]:
            return [v + rng.gauss(0.0, spread) for v in values]

        out.append(Scored(sample, sampling=near(0.25), old=near(0.1), reference=near(0.3)))
    return out


def datum(sample: Sample, logprobs: Scored | None = None) -> Datum:
    tokens = sample.prompt + sample.completion
    n = len(tokens) - 1
    context = len(sample.prompt) - 1
    trained = [t >= context for t in range(n)]

    def placed(values: list[float]) -> list[float]:
        return [1.0] * context + values

    return Datum(
        input_tokens_T=tokens[:-1],
        target_tokens_T=tokens[1:],
        weights_T=[1.0 if t else 0.0 for t in trained],
        sampling_logprobs_T=placed(logprobs.sampling) if logprobs else [1.0] * n,
        advantages_T=[sample.advantage] * n,
        old_logprobs_T=placed(logprobs.old) if logprobs else None,
        reference_logprobs_T=placed(logprobs.reference) if logprobs else None,
    )


def trl_token_truncate_weight(old_BT: torch.Tensor, sampling_BT: torch.Tensor, mask_BT: torch.Tensor, cap: float):
    """TRL 1.16.0's importance_sampling_ratio for vllm_importance_sampling_mode="token_truncate" (clip_min None)."""
    diff = torch.nan_to_num((old_BT - sampling_BT) * mask_BT, nan=0.0)
    return torch.clamp(torch.exp(diff), min=None, max=cap)


def trl_inputs(batch: list[Scored], variant: Variant) -> dict[str, torch.Tensor]:
    """What TRL's _generate_and_score_completions hands compute_loss, for ``batch``."""
    width_p = max(len(s.sample.prompt) for s in batch)
    width_c = max(len(s.sample.completion) for s in batch)

    def right(rows: list[list[float]], dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([r + [0] * (width_c - len(r)) for r in rows], dtype=dtype)

    prompt_ids = torch.tensor([[PAD] * (width_p - len(s.sample.prompt)) + s.sample.prompt for s in batch])
    prompt_mask = torch.tensor([[0] * (width_p - len(s.sample.prompt)) + [1] * len(s.sample.prompt) for s in batch])
    completion_mask = right([[1] * len(s.sample.completion) for s in batch], torch.long)
    sampling = right([s.sampling for s in batch], torch.float32)
    old = right([s.old for s in batch], torch.float32)
    advantages: torch.Tensor = torch.tensor([s.sample.advantage for s in batch])
    denominator = sampling
    cap = variant.loss.importance_sampling_cap
    if cap is not None:
        weight = trl_token_truncate_weight(old, sampling, completion_mask.float(), cap)
        advantages = advantages[:, None] * weight
        denominator = old
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": right([s.sample.completion for s in batch], torch.long),
        "completion_mask": completion_mask,
        "advantages": advantages,
        "old_per_token_logps": denominator,
        "num_items_in_batch": completion_mask.sum(),
    }
    if variant.loss.beta > 0:
        inputs["ref_per_token_logps"] = right([s.reference for s in batch], torch.float32)
    return inputs


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen3 (grouped-query attention, q/k norms) with the shipped tokenizer."""
    if trl is None:
        skip_or_fail("trl is not installed: pip install 'trl==1.16.0' (the dev extra carries it)")
    from transformers import Qwen3Config, Qwen3ForCausalLM

    directory = tmp_path_factory.mktemp("qwen3")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(
            Qwen3Config(
                vocab_size=100,
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=16,
                max_position_embeddings=64,
                pad_token_id=PAD,
                bos_token_id=1,
                eos_token_id=2,
            )
        )
    model.save_pretrained(directory)
    source = embedded_base_model_dir()
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            (directory / name).write_bytes((source / name).read_bytes())
    return directory


@pytest.fixture(scope="module")
def trl_trainer(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``trl_trainer(variant)``: a GRPOTrainer with the variant's settings, built once per setting."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    built: dict[str, Any] = {}
    output = tmp_path_factory.mktemp("trl")

    def make(variant: Variant) -> Any:
        key = repr(sorted(variant.trl_args.items()))
        if key not in built:
            args = trl.GRPOConfig(
                output_dir=str(output),
                per_device_train_batch_size=4,
                num_generations=2,
                max_completion_length=MAX_COMPLETION_LENGTH,
                report_to=[],
                use_cpu=True,
                bf16=False,
                use_vllm=False,
                activation_checkpointing=False,
                save_strategy="no",
                disable_tqdm=True,
                logging_steps=1,
                **variant.trl_args,
            )
            built[key] = trl.GRPOTrainer(
                model=AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32),
                reward_funcs=lambda completions, **_: [0.0] * len(completions),
                args=args,
                train_dataset=Dataset.from_dict({"prompt": ["a", "b", "c", "d"]}),
                processing_class=AutoTokenizer.from_pretrained(str(model_dir)),
            )
        return built[key]

    return make


def trl_step(trainer: Any, inputs: dict[str, torch.Tensor]) -> tuple[float, dict[str, torch.Tensor], dict[str, Any]]:
    """TRL's loss, its gradient by parameter name, and the diagnostics it logs for that call."""
    model = trainer.model
    model.eval()  # eval: no division by gradient-accumulation steps (one window here)
    model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(model, inputs)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    trainer.log({})
    return float(loss.detach()), grads, trainer.state.log_history[-1]


def ours(model_dir: Path, data: list[Datum], variant: Variant, packed: bool) -> tuple[Any, dict[str, torch.Tensor]]:
    backend = LocalBackend(model_dir, pack_batches=packed)
    out = backend.forward_backward(data, variant.loss_fn, variant.loss)
    grads = {name: p.grad.detach().clone() for name, p in backend.model.named_parameters() if p.grad is not None}
    return out, grads


BATCHES = {"uneven": uneven_batch, "packed": grouped_batch}


@pytest.mark.parametrize("batch_name", list(BATCHES))
@pytest.mark.parametrize("name", list(VARIANTS))
def test_loss_and_gradient_equal_trl(model_dir: Path, trl_trainer: Any, name: str, batch_name: str) -> None:
    variant = VARIANTS[name]
    samples = BATCHES[batch_name]()
    packed = batch_name == "packed"
    current = LocalBackend(model_dir).forward([datum(s) for s in samples])
    batch = scored(samples, current)
    data = [datum(s.sample, s) for s in batch]
    if packed:
        assert can_pack(data) and len(pack(data, PAD).counts_R) < len(data)  # really packed, and deduplicated

    trl_loss, trl_grads, logged = trl_step(trl_trainer(variant), trl_inputs(batch, variant))
    out, grads = ours(model_dir, data, variant, packed)

    assert out.loss == pytest.approx(trl_loss, rel=RTOL, abs=ATOL)
    assert set(grads) == set(trl_grads)
    for key, grad in grads.items():
        torch.testing.assert_close(grad, trl_grads[key], rtol=RTOL, atol=ATOL, msg=key)
    # The diagnostics TRL logs for the same call.
    assert out.metrics["entropy"] == pytest.approx(logged["eval_entropy"], rel=RTOL, abs=ATOL)
    if variant.loss.beta > 0:
        assert out.metrics["kl"] == pytest.approx(logged["eval_kl"], rel=RTOL, abs=ATOL)
    if variant.loss_fn == "cispo":
        assert out.metrics["clip_fraction_high"] == pytest.approx(logged["eval_cispo_clip_ratio"], abs=ATOL)
    elif variant.loss_fn == "ppo":
        assert out.metrics["clip_fraction_low"] == pytest.approx(logged["eval_clip_ratio/low_mean"], abs=ATOL)
        assert out.metrics["clip_fraction_high"] == pytest.approx(logged["eval_clip_ratio/high_mean"], abs=ATOL)


def test_the_checks_clip_something(model_dir: Path) -> None:
    """The comparisons above mean something only if the clip ranges bind on their batches."""
    samples = uneven_batch()
    current = LocalBackend(model_dir).forward([datum(s) for s in samples])
    data = [datum(s.sample, s) for s in scored(samples, current)]
    out, _ = ours(model_dir, data, VARIANTS["ppo-dapo"], packed=False)
    assert 0 < out.metrics["clip_fraction"] < 1
    assert out.metrics["clip_fraction_low"] > 0 and out.metrics["clip_fraction_high"] > 0
