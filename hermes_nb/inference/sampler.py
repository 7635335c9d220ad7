"""Batched autoregressive sampling with a KV cache, one row per requested sequence.

Rows from many requests run as one batch: prompts are left-padded (position ids count real tokens only), the
cache is extended one token per step, each row has its own temperature, top-p, token budget and stop
conditions, and rows that finish leave the batch (the cache is sliced) so the tail of a batch costs only what
is still running.

The model runs once per distinct prefix, not once per row: a group's rows share their prompt, and a policy that
has learned anything samples the same first tokens on many of them. Rows with the same prompt and the same
tokens so far have the same next-token logits, so each step computes the logits of every distinct prefix once
(its cache row gathered from its parent's) and every row draws its own token from its prefix's logits, with its
own settings and noise: the same distribution as one forward row per sample, at a fraction of the arithmetic.

Device and dtype are the model's own: the batch's tensors and the noise are made on the device its parameters
are on, and logits are upcast to float32 before the (log-)softmax, so a bfloat16 model samples from, and reports,
float32 probabilities of its logits.

Logprobs: each returned logprob is the sampled token's logprob under the distribution it was actually drawn
from — ``softmax(logits / temperature)`` restricted to the top-p nucleus and renormalised. At temperature 1
and top_p 1 that is the model's own forward-pass logprob. This is what an importance ratio needs (``q`` in
``p_current / q``). Greedy rows (temperature 0) draw from a point mass, so their logprob is 0.0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from hermes_nb.inference.fast_forward import FastForward, KVCache, select_rows
from hermes_nb.inference.fast_forward import supports as fast_forward_supports
from hermes_nb.protocol.inference import FinishReason

# Keeps Gumbel noise finite: u in (0, 1) strictly, so -log(-log(u)) never hits +-inf.
_UNIFORM_EPS = 1e-10


@dataclass(frozen=True)
class SampleRow:
    """One sequence to generate."""

    prompt: list[int]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop_token_ids: frozenset[int] = frozenset()
    stop_strings: tuple[str, ...] = ()
    # A seeded row draws its noise from its own generator: same output whatever else shares the batch.
    seed: int | None = None


@dataclass
class RowResult:
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: FinishReason = "length"


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids [B, L], attention_mask [B, L], position_ids [B, L])`` with prompts aligned to the right."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        ids[i, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
        mask[i, width - len(prompt) :] = 1
    # Real tokens get positions 0..len-1 whatever their padding; padding positions are masked anyway.
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, positions


def sampling_logprobs(logits_BV: torch.Tensor, temperature_B: torch.Tensor, top_p_B: torch.Tensor) -> torch.Tensor:
    """Log-probabilities of the distribution each row samples from (temperature, then top-p), ``[B, V]``."""
    # Greedy rows (temperature 0) are scaled by 1: only their argmax is used.
    scale_B = torch.where(temperature_B > 0, temperature_B, torch.ones_like(temperature_B))
    logp_BV = torch.log_softmax(logits_BV.float() / scale_B[:, None], dim=-1)
    if bool((top_p_B < 1.0).any()):
        logp_BV = _nucleus(logp_BV, top_p_B)
    return logp_BV


def _nucleus(logp_BV: torch.Tensor, top_p_B: torch.Tensor) -> torch.Tensor:
    sorted_BV, order_BV = logp_BV.sort(dim=-1, descending=True)
    probs_BV = sorted_BV.exp()
    # Mass strictly before each token; a token is kept while that mass is below top_p (the first always is).
    before_BV = probs_BV.cumsum(-1) - probs_BV
    drop_sorted_BV = before_BV >= top_p_B[:, None]
    drop_BV = torch.zeros_like(drop_sorted_BV).scatter(-1, order_BV, drop_sorted_BV)
    kept_BV = logp_BV.masked_fill(drop_BV, float("-inf"))
    return kept_BV - torch.logsumexp(kept_BV, dim=-1, keepdim=True)


def draw(
    logp_BV: torch.Tensor,
    rows: Sequence[SampleRow],
    generators: dict[int, torch.Generator],
    batch_generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row (Gumbel-max, exact for the categorical) -> ``(tokens [B], logprobs [B])``.
    The generators are on ``logp_BV``'s device (``device_generator``)."""
    device = logp_BV.device
    uniform_BV = torch.rand(logp_BV.shape, generator=batch_generator, device=device)
    for i, row in enumerate(rows):
        if row.seed is not None:
            uniform_BV[i] = torch.rand(logp_BV.shape[1], generator=generators[i], device=device)
    uniform_BV = uniform_BV.clamp(_UNIFORM_EPS, 1.0 - _UNIFORM_EPS)
    gumbel_BV = -torch.log(-torch.log(uniform_BV))
    greedy_B = torch.tensor([row.temperature == 0 for row in rows], device=device)
    noisy_BV = torch.where(greedy_B[:, None], logp_BV, logp_BV + gumbel_BV)
    tokens_B = noisy_BV.argmax(dim=-1)
    chosen_B = logp_BV.gather(-1, tokens_B[:, None]).squeeze(-1)
    return tokens_B, torch.where(greedy_B, torch.zeros_like(chosen_B), chosen_B)


def model_device(model: Any) -> torch.device:
    """The device of ``model``'s parameters, where every tensor of its batch goes."""
    return next(model.parameters()).device


def device_generator(device: torch.device, seed: int) -> torch.Generator:
    """A seeded generator on ``device``: torch draws noise only from a generator on the device it fills."""
    return torch.Generator(device=device).manual_seed(seed)


def cache_argument(model: Any) -> str:
    """The keyword a model's forward takes its KV cache by: ``cache`` in transformers 5.x, earlier
    ``past_key_values`` (5.x still accepts it with a deprecation warning)."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft forwards **kwargs
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


class _Batch:
    """The rows still running, their results, and per-row sampling settings as tensors."""

    def __init__(self, rows: Sequence[SampleRow], device: torch.device) -> None:
        self.rows = list(rows)
        self.device = device
        self.active = list(range(len(rows)))  # index into rows of each batch position
        self.results = [RowResult() for _ in rows]
        self.temperature_B = torch.tensor([r.temperature for r in rows], dtype=torch.float32, device=device)
        self.top_p_B = torch.tensor([r.top_p for r in rows], dtype=torch.float32, device=device)
        self.generators = {i: device_generator(device, r.seed) for i, r in enumerate(rows) if r.seed is not None}

    def keep(self, positions: list[int]) -> None:
        self.active = [self.active[p] for p in positions]
        index = torch.tensor(positions, dtype=torch.long, device=self.device)
        self.temperature_B = self.temperature_B[index]
        self.top_p_B = self.top_p_B[index]


def _finished(row: SampleRow, result: RowResult, token: int, decode: Callable[[list[int]], str]) -> bool:
    if token in row.stop_token_ids:
        result.finish_reason = "stop"
        return True
    if row.stop_strings and any(s in decode(result.token_ids) for s in row.stop_strings):
        result.finish_reason = "stop"
        return True
    if len(result.token_ids) >= row.max_tokens:
        result.finish_reason = "length"
        return True
    return False


class _TransformersStepper:
    """Runs any Hugging Face causal LM through its own forward and ``DynamicCache``."""

    def __init__(self, model: Any) -> None:
        from transformers import DynamicCache

        self.model = model
        self.cache = DynamicCache()
        self.cache_kw = {cache_argument(model): self.cache}

    def prefill(self, ids_PL: torch.Tensor, mask_PL: torch.Tensor, positions_PL: torch.Tensor) -> torch.Tensor:
        """Runs the prompts into the cache; the logits of their last position ``[P, V]``."""
        out = self.model(
            input_ids=ids_PL, attention_mask=mask_PL, position_ids=positions_PL, use_cache=True, logits_to_keep=1,
            **self.cache_kw,
        )  # fmt: skip
        return out.logits[:, -1, :]

    def select(self, index: torch.Tensor) -> None:
        self.cache.batch_select_indices(index)

    def extend(self, ids_BT: torch.Tensor, mask_BK: torch.Tensor, positions_BT: torch.Tensor) -> torch.Tensor:
        """Runs ``T`` more tokens per row on top of the cache; their logits ``[B, T, V]``."""
        out = self.model(
            input_ids=ids_BT, attention_mask=mask_BK, position_ids=positions_BT, use_cache=True, **self.cache_kw
        )
        return out.logits


class _FastStepper:
    """The same steps through ``hermes_nb.inference.fast_forward`` (Llama and Qwen3 models: a fraction of the
    overhead)."""

    def __init__(self, model: Any) -> None:
        self.forward = FastForward(model)
        self.cache: KVCache = []

    def prefill(self, ids_PL: torch.Tensor, mask_PL: torch.Tensor, positions_PL: torch.Tensor) -> torch.Tensor:
        logits, self.cache = self.forward(ids_PL, positions_PL, mask_PL, last_only=True)
        return logits[:, -1, :]

    def select(self, index: torch.Tensor) -> None:
        self.cache = select_rows(self.cache, index)

    def extend(self, ids_BT: torch.Tensor, mask_BK: torch.Tensor, positions_BT: torch.Tensor) -> torch.Tensor:
        logits, self.cache = self.forward(ids_BT, positions_BT, mask_BK, self.cache)
        return logits


def stepper_for(model: Any) -> _TransformersStepper | _FastStepper:
    """A cached forward over ``model``: the lean Llama/Qwen3 one where it applies. Under autograd (the trainer's
    packed pass) gradients flow through the cache; one stepper serves one set of weights."""
    return _FastStepper(model) if fast_forward_supports(model) else _TransformersStepper(model)


def _keeps_every_row(index: torch.Tensor, size: int) -> bool:
    """Whether gathering ``index`` from ``size`` rows gives the same rows back, so the cache need not be copied."""
    return len(index) == size and torch.equal(index, torch.arange(size, device=index.device))


@torch.no_grad()
def generate(
    model: Any,
    rows: Sequence[SampleRow],
    *,
    pad_id: int,
    decode: Callable[[list[int]], str],
    generator: torch.Generator,
) -> list[RowResult]:
    """Generate every row in one batch with a KV cache, one forward row per distinct prefix (the module doc).
    ``model`` is a Hugging Face causal LM (eval mode); ``generator`` is on its device (``device_generator``)."""
    if not rows:
        return []
    device = model_device(model)
    batch = _Batch(rows, device)
    # The first prefixes are the distinct prompts: a group request repeats one prompt n times.
    unique: dict[tuple[int, ...], int] = {}
    prompt_index = [unique.setdefault(tuple(r.prompt), len(unique)) for r in rows]
    row_prefix_B = torch.tensor(prompt_index, dtype=torch.long, device=device)
    ids_NL, mask_NL, positions_NL = (t.to(device) for t in left_pad(list(unique), pad_id))
    stepper = stepper_for(model)
    logits_NV = stepper.prefill(ids_NL, mask_NL, positions_NL)
    next_position_N = positions_NL[:, -1] + 1
    while True:
        logp_BV = sampling_logprobs(logits_NV[row_prefix_B], batch.temperature_B, batch.top_p_B)
        tokens_B, chosen_B = draw(
            logp_BV,
            [rows[i] for i in batch.active],
            {p: batch.generators[i] for p, i in enumerate(batch.active) if i in batch.generators},
            generator,
        )
        running: list[int] = []
        tokens, chosen = tokens_B.tolist(), chosen_B.tolist()
        for position, row_index in enumerate(batch.active):
            result, token = batch.results[row_index], tokens[position]
            result.token_ids.append(token)
            result.logprobs.append(chosen[position])
            if not _finished(rows[row_index], result, token, decode):
                running.append(position)
        if not running:
            return batch.results
        if len(running) < len(batch.active):
            # Finished rows leave the batch, with their per-row settings.
            index = torch.tensor(running, dtype=torch.long, device=device)
            row_prefix_B, tokens_B = row_prefix_B[index], tokens_B[index]
            batch.keep(running)
        # The new prefixes: each distinct (prefix, token) of the rows still running, its cache row its parent's.
        vocab = logits_NV.shape[-1]
        prefixes, row_prefix_B = torch.unique(row_prefix_B * vocab + tokens_B, return_inverse=True)
        parent_N, token_N = prefixes // vocab, prefixes % vocab
        if not _keeps_every_row(parent_N, len(next_position_N)):
            stepper.select(parent_N)
            mask_NL, next_position_N = mask_NL[parent_N], next_position_N[parent_N]
        mask_NL = torch.cat([mask_NL, torch.ones((len(parent_N), 1), dtype=torch.long, device=device)], dim=1)
        logits_NV = stepper.extend(token_N[:, None], mask_NL, next_position_N[:, None])[:, -1, :]
        next_position_N = next_position_N + 1
