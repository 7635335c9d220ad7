"""A lean forward pass over a Hugging Face Llama or Qwen3 causal LM's own parameters.

At the embedded models' size (128-192 wide, 4 layers) most of a transformers forward call is Python around the
arithmetic: output capturing, mask construction, cache bookkeeping, config lookups, ~30 separate linear layers
(one decoding step at batch 1: 3.0-3.3 ms of CPU against 1.8-2.2 ms here, transformers 5.24). The sampler makes
one call per generated token and the trainer two per step. This module computes the same function with a
handful of tensor operations per layer, reading the module's parameters directly (so the trainer's gradients
flow into them unchanged):

- q, k and v come from one matrix product, gate and up from another;
- Qwen3's per-head RMSNorm of q and k is one norm over both, then one RoPE rotation over both;
- the KV cache is a list of per-layer buffers with room to grow: a decoding step writes its keys and values in
  place instead of copying the whole cache (``torch.cat``), which at a 300-token context was a quarter of the
  sampler's time;
- the attention mask is built once per call from a key-padding mask;
- layers that transformers would checkpoint (activation checkpointing on, training, gradients on) are
  checkpointed here too, cache included (transformers drops its cache under checkpointing).

It covers ``LlamaForCausalLM`` and ``Qwen3ForCausalLM`` as configured by transformers with the default RoPE,
full attention on every layer (no sliding window), SiLU MLPs without biases and no attention dropout; attention
biases are supported (``supports``). Anything else, including a peft-wrapped model, keeps the transformers
forward. Every tensor it makes lives on the device of its inputs and in the dtype of the module's parameters.
Tests pin its logits, cached steps and gradients to the transformers forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

# A full buffer grows to twice what it must hold: each position is copied O(1) times on average, and the
# buffers never hold more than twice the cache.
_GROWTH = 2

# Class name -> whether its attention normalises each head's q and k (Qwen3) before RoPE.
ARCHITECTURES = {"LlamaForCausalLM": False, "Qwen3ForCausalLM": True}


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
    """Whether ``model`` is a plain Llama or Qwen3 causal LM this forward reproduces exactly."""
    config = getattr(model, "config", None)
    if type(model).__name__ not in ARCHITECTURES or config is None:
        return False
    return (
        rope_theta(config) is not None
        and not getattr(config, "mlp_bias", False)
        and float(getattr(config, "attention_dropout", 0.0) or 0.0) == 0.0  # no dropout to reproduce in training
        and getattr(config, "hidden_act", "") == "silu"
        and getattr(config, "pretraining_tp", 1) == 1
        # Qwen3 marks sliding-window layers here; Llama has no layer types.
        and all(kind == "full_attention" for kind in getattr(config, "layer_types", None) or ())
    )


@dataclass(frozen=True)
class LayerCache:
    """One layer's keys and values, ``[B, KV heads, capacity, head dim]`` each, of which the first ``length``
    positions are filled."""

    keys: torch.Tensor
    values: torch.Tensor
    length: int

    def filled(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.keys[:, :, : self.length], self.values[:, :, : self.length]


KVCache = list[LayerCache]  # one per layer


def _extended(past: LayerCache | None, keys: torch.Tensor, values: torch.Tensor) -> LayerCache:
    """``past`` followed by ``keys``/``values`` (``[B, KV heads, T, head dim]``).

    Without gradients the new positions are written into ``past``'s buffers when they have room (so a cache is
    extended once: to branch, ``select_rows`` first, which copies). With gradients nothing is written in place:
    autograd keeps the tensors it saved, and a training pass makes two calls, not hundreds.
    """
    new = keys.shape[2]
    if torch.is_grad_enabled():
        if past is None:
            return LayerCache(keys, values, new)
        past_keys, past_values = past.filled()
        return LayerCache(torch.cat([past_keys, keys], 2), torch.cat([past_values, values], 2), past.length + new)
    start = 0 if past is None else past.length
    length = start + new
    if past is not None and length <= past.keys.shape[2]:
        buffers = past.keys, past.values
    else:
        batch, heads, _, dim = keys.shape
        buffers = (
            keys.new_empty(batch, heads, _GROWTH * length, dim),
            values.new_empty(batch, heads, _GROWTH * length, dim),
        )
        if past is not None:
            buffers[0][:, :, :start], buffers[1][:, :, :start] = past.filled()
    buffers[0][:, :, start:length], buffers[1][:, :, start:length] = keys, values
    return LayerCache(buffers[0], buffers[1], length)


@dataclass(frozen=True)
class _Layer:
    input_norm: torch.Tensor
    qkv: torch.Tensor  # [(heads + 2 kv heads) * head dim, hidden]
    qkv_bias: torch.Tensor | None
    qk_norm: torch.Tensor | None  # [heads + kv heads, head dim]: q_norm's weight per query head, then k_norm's
    out: torch.Tensor
    out_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: torch.Tensor  # [2 * intermediate, hidden]
    down: torch.Tensor
    checkpointed: bool  # transformers' activation checkpointing is on for this layer


class FastForward:
    """``FastForward(model)(ids, positions, key_mask, cache)`` -> ``(logits, cache)``.

    Build one per set of weights: the fused matrices are made at construction (inside the autograd graph when
    gradients are on, so a training pass's gradients reach the module's own parameters).
    """

    def __init__(self, model: Any) -> None:
        if not supports(model):
            raise ValueError(f"{type(model).__name__}: not a plain Llama or Qwen3 model; use the transformers forward")
        config = model.config
        self._model = model
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads or self.heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.heads)
        self.eps = float(config.rms_norm_eps)
        # transformers' own buffer (float32 unless the module was cast), on the parameters' device: its RoPE exactly.
        self.inv_freq = model.model.rotary_emb.inv_freq.float()
        self._layers = [self._fused(layer, ARCHITECTURES[type(model).__name__]) for layer in model.model.layers]

    def _fused(self, layer: Any, head_norms: bool) -> _Layer:
        attention, mlp = layer.self_attn, layer.mlp
        projections = (attention.q_proj, attention.k_proj, attention.v_proj)
        biases = [p.bias for p in projections]
        qk_norm = None
        if head_norms:  # one weight row per head, so one norm call covers q and k
            q_norm = attention.q_norm.weight.expand(self.heads, self.head_dim)
            qk_norm = torch.cat([q_norm, attention.k_norm.weight.expand(self.kv_heads, self.head_dim)])
        return _Layer(
            input_norm=layer.input_layernorm.weight,
            qkv=torch.cat([p.weight for p in projections]),
            qkv_bias=None if biases[0] is None else torch.cat(biases),
            qk_norm=qk_norm,
            out=attention.o_proj.weight,
            out_bias=attention.o_proj.bias,
            post_norm=layer.post_attention_layernorm.weight,
            gate_up=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
            down=mlp.down_proj.weight,
            checkpointed=bool(getattr(layer, "gradient_checkpointing", False)),
        )

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

        ``key_mask_BK`` marks real tokens among the cached ones followed by these T (``K = past + T``). Without
        gradients the new keys and values may be written into ``cache``'s buffers: pass a cache to one call only.
        """
        model = self._model.model
        x = model.embed_tokens(ids_BT)
        cos, sin = self._rope(positions_BT, x.dtype)
        # [B, 1, group * T, K]: each key/value head attends for its group of query heads (``_attention``).
        mask = self._attention_mask(key_mask_BK, ids_BT.shape[1]).repeat(1, 1, self.heads // self.kv_heads, 1)
        # As transformers: checkpoint only when a backward pass will replay the layer.
        replayable = self._model.training and torch.is_grad_enabled()
        new_cache: KVCache = []
        for index, layer in enumerate(self._layers):
            past = cache[index] if cache is not None else None
            if layer.checkpointed and replayable:
                x, keys_values = checkpoint(self._block, x, layer, cos, sin, mask, past, use_reentrant=False)
            else:
                x, keys_values = self._block(x, layer, cos, sin, mask, past)
            new_cache.append(keys_values)
        if last_only:
            x = x[:, -1:, :]
        x = _rms_norm(x, model.norm.weight, self.eps)
        return self._model.lm_head(x), new_cache

    def _block(
        self,
        x: torch.Tensor,
        layer: _Layer,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        past: LayerCache | None,
    ) -> tuple[torch.Tensor, LayerCache]:
        attended, keys_values = self._attention(_rms_norm(x, layer.input_norm, self.eps), layer, cos, sin, mask, past)
        x = x + attended
        gate, up = F.linear(_rms_norm(x, layer.post_norm, self.eps), layer.gate_up).chunk(2, dim=-1)
        return x + F.linear(F.silu(gate) * up, layer.down), keys_values

    def _rope(self, positions_BT: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions_BT[..., None].float() * self.inv_freq
        angles = torch.cat([freqs, freqs], dim=-1)
        return angles.cos().to(dtype)[:, :, None], angles.sin().to(dtype)[:, :, None]  # [B, T, 1, D]

    @staticmethod
    def _attention_mask(key_mask_BK: torch.Tensor, new: int) -> torch.Tensor:
        """``[B, 1, T, K]`` booleans: a real key at or before the query. A query on padding also sees itself, so
        no row is empty (an empty row gives NaN, and 0 x NaN would reach real tokens through the values)."""
        keys = key_mask_BK.shape[1]
        key_at = torch.arange(keys, device=key_mask_BK.device)[None, :]
        query_at = torch.arange(keys - new, keys, device=key_mask_BK.device)[:, None]
        mask = (key_at <= query_at)[None] & key_mask_BK.bool()[:, None, :]
        mask = mask | (key_at == query_at)[None]
        return mask[:, None]

    def _attention(
        self,
        x: torch.Tensor,
        layer: _Layer,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        past: LayerCache | None,
    ) -> tuple[torch.Tensor, LayerCache]:
        batch, new, _ = x.shape
        qkv = F.linear(x, layer.qkv, layer.qkv_bias).view(batch, new, self.heads + 2 * self.kv_heads, self.head_dim)
        qk, v = qkv.split([self.heads + self.kv_heads, self.kv_heads], dim=2)  # [B, T, H + KV, D], [B, T, KV, D]
        if layer.qk_norm is not None:
            qk = _rms_norm(qk, layer.qk_norm, self.eps)
        qk = (qk * cos + _rotate_half(qk) * sin).transpose(1, 2)  # [B, H + KV, T, D]
        q, k = qk.split([self.heads, self.kv_heads], dim=1)
        v = v.transpose(1, 2)  # [B, KV, T, D]
        cache = _extended(past, k, v)
        k, v = cache.filled()
        # Grouped-query attention without copying keys and values per query head: the query heads sharing a
        # key/value head become extra query rows of it, [B, KV, group * T, D] (the mask was repeated to match).
        grouped_q = q.reshape(batch, self.kv_heads, self.heads // self.kv_heads * new, self.head_dim)
        attended = F.scaled_dot_product_attention(grouped_q, k, v, attn_mask=mask, scale=self.head_dim**-0.5)
        attended = attended.view(batch, self.heads, new, self.head_dim).transpose(1, 2)  # [B, T, H, D]
        attended = attended.reshape(batch, new, self.heads * self.head_dim)  # [B, T, H * D]
        return F.linear(attended, layer.out, layer.out_bias), cache


def select_rows(cache: KVCache, index: torch.Tensor) -> KVCache:
    """The cache of the rows ``index``, in new buffers (gathering keeps gradients when the cache has them)."""
    return [LayerCache(layer.keys[index], layer.values[index], layer.length) for layer in cache]


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)
