"""A lean forward pass over a Hugging Face ``LlamaForCausalLM``'s own parameters.

At the embedded model's size (128 wide, 4 layers) a transformers forward call costs ~4 ms of Python before any
arithmetic: output capturing, mask construction, cache bookkeeping, config lookups, 29 separate linear layers.
The sampler makes one call per generated token and the trainer two per step, so on two CPU cores that overhead
was a fifth of all the work. This module computes the same function with a handful of tensor operations per
layer, reading the module's parameters directly (so the trainer's gradients flow into them unchanged):

- q, k and v come from one matrix product, gate and up from another;
- the KV cache is a plain list of ``(keys, values)`` per layer, indexed like any tensor;
- the attention mask is built once per call from a key-padding mask.

It covers the Llama architecture as configured by transformers with the default RoPE, no biases and SiLU MLPs
(``supports``); anything else, including a peft-wrapped model, keeps the transformers forward. Tests pin its
logits to the transformers forward, with and without padding, cache and grouped-query attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

KVCache = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values [B, KV heads, T, head dim]


def rope_theta(config: Any) -> float | None:
    """The RoPE base of a default-RoPE config (transformers 5 keeps it in ``rope_parameters``, 4.x in
    ``rope_theta``); ``None`` for any scaled or otherwise different RoPE."""
    parameters = getattr(config, "rope_parameters", None) or {}
    scaling = getattr(config, "rope_scaling", None) or {}  # 4.x; in 5.x an alias of rope_parameters
    kinds = {parameters.get("rope_type", "default"), scaling.get("rope_type", scaling.get("type", "default"))}
    if kinds != {"default"}:
        return None
    theta = parameters.get("rope_theta", getattr(config, "rope_theta", None))
    return float(theta) if theta is not None else None


def supports(model: Any) -> bool:
    """Whether ``model`` is a plain ``LlamaForCausalLM`` this forward reproduces exactly."""
    config = getattr(model, "config", None)
    if type(model).__name__ != "LlamaForCausalLM" or config is None:
        return False
    return (
        rope_theta(config) is not None
        and not getattr(config, "attention_bias", False)
        and not getattr(config, "mlp_bias", False)
        and float(getattr(config, "attention_dropout", 0.0) or 0.0) == 0.0  # no dropout to reproduce in training
        and getattr(config, "hidden_act", "") == "silu"
        and getattr(config, "pretraining_tp", 1) == 1
    )


@dataclass(frozen=True)
class _Layer:
    input_norm: torch.Tensor
    qkv: torch.Tensor  # [(heads + 2 kv heads) * head dim, hidden]
    out: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor  # [2 * intermediate, hidden]
    down: torch.Tensor


class FastLlama:
    """``FastLlama(model)(ids, positions, key_mask, cache)`` -> ``(logits, cache)``.

    Build one per set of weights: the fused matrices are made at construction (inside the autograd graph when
    gradients are on, so a training pass's gradients reach the module's own parameters).
    """

    def __init__(self, model: Any) -> None:
        config = model.config
        self._model = model
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads or self.heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.heads)
        self.eps = float(config.rms_norm_eps)
        theta = rope_theta(config)
        if theta is None or not supports(model):
            raise ValueError(f"{type(model).__name__}: not a plain Llama model; use the transformers forward")
        steps = torch.arange(0, self.head_dim, 2, dtype=torch.float) / self.head_dim
        self.inv_freq = 1.0 / (theta**steps)
        self._layers = self._fused_layers()

    def _fused_layers(self) -> list[_Layer]:
        layers = []
        for layer in self._model.model.layers:
            attention, mlp = layer.self_attn, layer.mlp
            qkv = torch.cat([attention.q_proj.weight, attention.k_proj.weight, attention.v_proj.weight])
            layers.append(
                _Layer(
                    input_norm=layer.input_layernorm.weight,
                    qkv=qkv,
                    out=attention.o_proj.weight,
                    post_norm=layer.post_attention_layernorm.weight,
                    gate_up=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
                    down=mlp.down_proj.weight,
                )
            )
        return layers

    def __call__(
        self,
        ids_BT: torch.Tensor,
        positions_BT: torch.Tensor,
        key_mask_BK: torch.Tensor,
        cache: KVCache | None = None,
        *,
        last_only: bool = False,
    ) -> tuple[torch.Tensor, KVCache]:
        """Logits ``[B, T, V]`` (``[B, 1, V]`` with ``last_only``) and the cache extended by these T tokens.

        ``key_mask_BK`` marks real tokens among the cached ones followed by these T (``K = past + T``).
        """
        model = self._model.model
        x = model.embed_tokens(ids_BT)
        cos, sin = self._rope(positions_BT, x.dtype)
        mask = self._attention_mask(key_mask_BK, ids_BT.shape[1])
        new_cache: KVCache = []
        for index, layer in enumerate(self._layers):
            past = cache[index] if cache is not None else None
            attended, keys_values = self._attention(
                _rms_norm(x, layer.input_norm, self.eps), layer, cos, sin, mask, past
            )
            x = x + attended
            new_cache.append(keys_values)
            gate, up = F.linear(_rms_norm(x, layer.post_norm, self.eps), layer.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.down)
        if last_only:
            x = x[:, -1:, :]
        x = _rms_norm(x, model.norm.weight, self.eps)
        return self._model.lm_head(x), new_cache

    def _rope(self, positions_BT: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions_BT[..., None].float() * self.inv_freq
        angles = torch.cat([freqs, freqs], dim=-1)
        return angles.cos().to(dtype)[:, None], angles.sin().to(dtype)[:, None]  # [B, 1, T, D]

    @staticmethod
    def _attention_mask(key_mask_BK: torch.Tensor, new: int) -> torch.Tensor:
        """``[B, 1, T, K]`` booleans: a real key at or before the query. A query on padding also sees itself, so
        no row is empty (an empty row gives NaN, and 0 x NaN would reach real tokens through the values)."""
        keys = key_mask_BK.shape[1]
        past = keys - new
        query_at = torch.arange(past, keys)[:, None]
        causal_TK = torch.arange(keys)[None, :] <= query_at
        mask = causal_TK[None] & key_mask_BK.bool()[:, None, :]
        mask = mask | (torch.arange(keys)[None, :] == query_at)[None]
        return mask[:, None]

    def _attention(
        self,
        x: torch.Tensor,
        layer: _Layer,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        batch, new, _ = x.shape
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q, k, v = F.linear(x, layer.qkv).split([q_size, kv_size, kv_size], dim=-1)
        q = q.view(batch, new, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(batch, new, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, new, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        repeat = self.heads // self.kv_heads
        keys, values = (k, v) if repeat == 1 else (k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1))
        attended = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.head_dim**-0.5)
        attended = attended.transpose(1, 2).reshape(batch, new, q_size)
        return F.linear(attended, layer.out), (k, v)


def select_rows(cache: KVCache, index: torch.Tensor) -> KVCache:
    """The cache of the rows ``index`` (gathering keeps gradients when the cache has them)."""
    return [(k[index], v[index]) for k, v in cache]


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)
