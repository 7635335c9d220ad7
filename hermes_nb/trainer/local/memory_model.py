"""What a run's trainer and sampler hold in memory, predicted from the config alone (no torch, no weights read).

The sizes come from the model's ``config.json``; the rest from what the local backend does (``local_backend.py``):

- weights: float32 for a full fine-tune (Adam updates round away in bfloat16), the compute dtype for a LoRA base
  plus float32 adapters;
- gradients and Adam's two moments: float32, for the trained parameters only;
- activations: what autograd keeps per token and layer for the backward pass (a micro-batch at a time); under
  gradient checkpointing, each layer's input plus one layer's activations recomputed;
- logits: one micro-batch's (``MAX_LOGITS_ELEMENTS`` at most, by sequence) in the compute dtype, and their
  gradient; the float32 log-softmax runs in blocks of ``LOGITS_CHUNK_ELEMENTS`` (``trainer/step/losses.py``);
- the sampler: its copy of the weights in the compute dtype, the state dict published after a step, and the KV
  cache of one batch of sequences (native) or vLLM's share (``trainer.vllm_gpu_memory_utilization`` of the GPU;
  1 GiB on the CPU, vLLM's default ``VLLM_CPU_KVCACHE_SPACE``).

After a step the trainer hands the sampler its weights: one copy of the state dict in the compute dtype (a LoRA
run's adapted layers merged into it one at a time), with the gradients freed. Otherwise the trainer's peak is in a
step's backward pass after the first (the Adam moments exist from the first step on):
weights + gradients + optimizer state, and the larger of two moments: the top of the backward pass (activations
and logits alive) and its end, where the embedding's gradients arrive. There autograd holds whole ``[V, H]``
partial gradients beside the parameter's ``.grad``: a tied embedding's two (its lookup's and the output layer's)
and their sum, and, from the second micro-batch on, any embedding's new gradient before it is added in place.
Measured on a Qwen3-0.6B-shaped model (151,936 x 1,024 tied embedding), that moment is the peak; a measured step
is checked against the prediction in ``tests/unit/test_memory_model.py``. The pre-run estimate (issue 40) builds
on ``estimate_run``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from hermes_nb.config import RunConfig, base_model_dir
from hermes_nb.trainer.local.model_support import peft_targets
from hermes_nb.trainer.step.losses import LOGITS_CHUNK_ELEMENTS, MAX_LOGITS_ELEMENTS

VLLM_CPU_KV_CACHE_BYTES = 1 << 30  # vLLM's VLLM_CPU_KVCACHE_SPACE default (1 GiB)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
ADAM_STATES = 2  # AdamW's exp_avg and exp_avg_sq, float32 each
# What "all-linear" adapts (peft's table names none for the model type): every projection.
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

Device = Literal["cpu", "cuda"]
Dtype = Literal["float32", "bfloat16", "float16"]


class ModelSizes(BaseModel):
    """The sizes of a decoder-only transformer, from its ``config.json``."""

    model_config = ConfigDict(frozen=True)

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    tie_word_embeddings: bool

    @property
    def q_width(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_key_value_heads * self.head_dim

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """Each projection of a layer: ``(in, out)``."""
        hidden, inter = self.hidden_size, self.intermediate_size
        return {
            "q_proj": (hidden, self.q_width),
            "k_proj": (hidden, self.kv_width),
            "v_proj": (hidden, self.kv_width),
            "o_proj": (self.q_width, hidden),
            "gate_proj": (hidden, inter),
            "up_proj": (hidden, inter),
            "down_proj": (inter, hidden),
        }

    def parameters(self) -> int:
        """All parameters (norms included, biases left out: under 0.1% of any model here)."""
        layer = sum(i * o for i, o in self.linear_shapes().values()) + 2 * self.hidden_size + 2 * self.head_dim
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)
        return embeddings + self.num_hidden_layers * layer + self.hidden_size

    def lora_parameters(self, rank: int, targets: tuple[str, ...]) -> int:
        """Adapter parameters: ``rank x (in + out)`` for each targeted projection of each layer."""
        shapes = self.linear_shapes()
        return self.num_hidden_layers * sum(rank * sum(shapes[t]) for t in targets if t in shapes)


def model_sizes(model_dir: Path) -> ModelSizes:
    """``ModelSizes`` from ``model_dir/config.json`` (a multimodal config's ``text_config`` where it has one)."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    text = {**config, **(config.get("text_config") or {})}
    heads = int(text["num_attention_heads"])
    return ModelSizes(
        model_type=str(text.get("model_type", "")),
        vocab_size=int(text["vocab_size"]),
        hidden_size=int(text["hidden_size"]),
        intermediate_size=int(text["intermediate_size"]),
        num_hidden_layers=int(text["num_hidden_layers"]),
        num_attention_heads=heads,
        num_key_value_heads=int(text.get("num_key_value_heads") or heads),
        head_dim=int(text.get("head_dim") or int(text["hidden_size"]) // heads),
        tie_word_embeddings=bool(text.get("tie_word_embeddings", True)),
    )


class StepShape(BaseModel):
    """What one training step and one sampling batch hold: sequences of at most ``sequence_tokens`` tokens."""

    model_config = ConfigDict(frozen=True)

    sequences: int
    sequence_tokens: int
    lora_rank: int = 0
    dtype: Dtype = "float32"
    device: Device = "cpu"
    gradient_checkpointing: bool = False
    sampler: Literal["native", "vllm"] = "native"
    vllm_gpu_memory_utilization: float = 0.4
    gpu_bytes: int = 0  # the CUDA device's memory, for vLLM's share; 0 on the CPU


class MemoryEstimate(BaseModel):
    """Bytes each part holds at the trainer's peak, and the sampler's."""

    model_config = ConfigDict(frozen=True)

    parameters: int
    trained_parameters: int
    weights: int
    gradients: int
    optimizer: int
    activations: int
    logits: int
    embedding_gradients: int
    sampler_weights: int
    kv_cache: int
    # What handing the sampler new weights after a step copies in the trainer (the gradients are freed by then).
    handover: int = 0

    @property
    def trainer_peak(self) -> int:
        """The trainer's own peak: a backward pass after the first step, or the weights' hand-over after it,
        whichever is larger (see the module doc)."""
        backward_top = self.activations + self.logits
        backward = self.weights + self.gradients + self.optimizer + max(backward_top, self.embedding_gradients)
        return max(backward, self.weights + self.optimizer + self.handover)

    @property
    def total(self) -> int:
        """The trainer's peak with an in-process sampler's weights and cache beside it."""
        return self.trainer_peak + self.sampler_weights + self.kv_cache


def _micro_batch_rows(sizes: ModelSizes, shape: StepShape) -> int:
    # As LocalBackend._micro_batches: as many sequences as keep the logits under MAX_LOGITS_ELEMENTS.
    fitting = max(1, MAX_LOGITS_ELEMENTS // (shape.sequence_tokens * sizes.vocab_size))
    return min(shape.sequences, fitting)


def activation_bytes(sizes: ModelSizes, shape: StepShape, compute_bytes: int) -> int:
    """What autograd keeps for one micro-batch's backward pass (see the module doc)."""
    tokens = _micro_batch_rows(sizes, shape) * shape.sequence_tokens
    # Per token and layer, the tensors a decoder layer saves: two norms' inputs and outputs (4 x hidden), q, k, v
    # and the attention output (2 q + 2 kv widths), o's output and the residual (2 x hidden), gate, up, the
    # activation and its product (4 x intermediate).
    per_layer = 6 * sizes.hidden_size + 2 * sizes.q_width + 2 * sizes.kv_width + 4 * sizes.intermediate_size
    # What a small model shows besides (the embedded model's measured step was 1.8x the terms above): the two
    # norms' normalised input and its scaled copy (4 x hidden), the rotary embedding's rotated q and k and their
    # rotate_half copies (2 q + 2 kv widths), and on the CPU, where attention runs the math path, its scores and
    # probabilities ([heads, T, T] each per sequence: 2 x heads x T per token).
    per_layer += 4 * sizes.hidden_size + 2 * sizes.q_width + 2 * sizes.kv_width
    if shape.device == "cpu":
        per_layer += 2 * sizes.num_attention_heads * shape.sequence_tokens
    if shape.gradient_checkpointing:
        # Each layer's input kept, one layer's activations recomputed at a time.
        return tokens * compute_bytes * (sizes.num_hidden_layers * sizes.hidden_size + per_layer)
    return tokens * compute_bytes * sizes.num_hidden_layers * per_layer


def logits_bytes(sizes: ModelSizes, shape: StepShape, compute_bytes: int) -> int:
    """One micro-batch's logits and their gradient, plus one float32 log-softmax block's temporaries."""
    elements = _micro_batch_rows(sizes, shape) * shape.sequence_tokens * sizes.vocab_size
    return 2 * elements * compute_bytes + 3 * 4 * min(elements, LOGITS_CHUNK_ELEMENTS)


def embedding_gradient_bytes(sizes: ModelSizes, shape: StepShape) -> int:
    """The ``[V, H]`` float32 partial gradients alive beside the embeddings' ``.grad`` (see the module doc)."""
    if shape.lora_rank:
        return 0  # a frozen embedding gets no gradient
    later_micro_batches = _micro_batch_rows(sizes, shape) < shape.sequences
    partials = (2 if sizes.tie_word_embeddings else 0) + (1 if later_micro_batches else 0)
    return partials * sizes.vocab_size * sizes.hidden_size * 4


def kv_cache_bytes(sizes: ModelSizes, shape: StepShape, compute_bytes: int) -> int:
    """The sampler's keys and values: one batch of sequences (native), or vLLM's share of the device."""
    if shape.sampler == "vllm":
        return (
            int(shape.gpu_bytes * shape.vllm_gpu_memory_utilization)
            if shape.device == "cuda"
            else (VLLM_CPU_KV_CACHE_BYTES)
        )
    per_token = 2 * sizes.num_hidden_layers * sizes.kv_width * compute_bytes  # keys and values
    return shape.sequences * shape.sequence_tokens * per_token


def estimate(sizes: ModelSizes, shape: StepShape) -> MemoryEstimate:
    """The memory of a step of ``shape`` on a model of ``sizes`` (see the module doc)."""
    compute = DTYPE_BYTES[shape.dtype]
    total = sizes.parameters()
    adapters = (
        sizes.lora_parameters(shape.lora_rank, tuple(peft_targets(sizes.model_type) or ALL_LINEAR))
        if shape.lora_rank
        else 0
    )
    trained = adapters or total
    weights = total * 4 if not shape.lora_rank else total * compute + adapters * 4
    return MemoryEstimate(
        parameters=total,
        trained_parameters=trained,
        weights=weights,
        gradients=trained * 4,
        optimizer=trained * 4 * ADAM_STATES,
        activations=activation_bytes(sizes, shape, compute),
        logits=logits_bytes(sizes, shape, compute),
        embedding_gradients=embedding_gradient_bytes(sizes, shape),
        # The sampler's copy, and the state dict published to it after a step.
        sampler_weights=2 * total * compute,
        kv_cache=kv_cache_bytes(sizes, shape, compute),
        handover=handover_bytes(total, compute),
    )


def handover_bytes(parameters: int, compute_bytes: int) -> int:
    """What ``LocalBackend.save_weights_for_sampler`` copies, a LoRA run as a full fine-tune: the state dict in the
    compute dtype, a LoRA run's adapted layers merged into it one at a time."""
    return parameters * compute_bytes


def estimate_run(config: RunConfig, device: Device = "cpu", gpu_bytes: int = 0) -> MemoryEstimate:
    """The memory of ``config``'s run on ``device`` (its ``auto`` settings resolved as on that device: float32 on
    the CPU, bfloat16 on CUDA)."""
    trainer = config.trainer
    dtype = trainer.dtype if trainer.dtype != "auto" else ("bfloat16" if device == "cuda" else "float32")
    shape = StepShape(
        sequences=int(config.env_value("batch_size")),
        sequence_tokens=int(config.env_value("max_token_length")),
        lora_rank=trainer.lora_rank,
        dtype=dtype,
        device=device,
        gradient_checkpointing=trainer.gradient_checkpointing,
        sampler="vllm" if trainer.sampler == "vllm" else "native",
        vllm_gpu_memory_utilization=trainer.vllm_gpu_memory_utilization,
        gpu_bytes=gpu_bytes,
    )
    return estimate(model_sizes(base_model_dir(trainer.base_model)), shape)
