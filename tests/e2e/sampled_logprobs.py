"""The check that a run trained on the server's own sampling: every trained position is the token the inference
server sampled, and the logprob kept beside it is the server's for that token, recomputed here from the weights the
run started with (a forward pass of this test process, independent of the run's server and trainer)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from hermes_nb.protocol.recorded_batches import read_trajectories
from hermes_nb.protocol.run_files import TRAJECTORIES_FILE
from hermes_nb.protocol.trajectory import MASK_IGNORE, ScoredDataGroup

# float32 on both sides; the server samples with a KV cache, this pass is one causal forward: they differ by
# rounding only (9e-6 measured on calculator_openenv), far below what another token's, another temperature's
# (0.21 at 0.7 instead of 1.0) or another weight's logprob would differ by.
LOGPROB_TOLERANCE = 1e-3


def trained_groups(run_dir: Path) -> dict[int, list[ScoredDataGroup]]:
    """The groups each step trained on, from the run's ``trajectories.jsonl.gz``."""
    return dict(read_trajectories(run_dir / TRAJECTORIES_FILE))


def worst_logprob_gap(groups: list[ScoredDataGroup], model_dir: Path, temperature: float) -> float:
    """The largest difference between a kept logprob and the model's, over every sampled position; asserts the
    positions are the sampled tokens (mask == token) and that the logprobs were kept."""
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    worst = 0.0
    for group in groups:
        assert group.inference_logprobs is not None, "the group kept no inference logprobs"
        for tokens, masks, kept in zip(group.tokens, group.masks, group.inference_logprobs, strict=True):
            sampled = [i for i, mask in enumerate(masks) if mask != MASK_IGNORE]
            assert sampled and all(masks[i] == tokens[i] for i in sampled), "a trained position is not its token"
            worst = max(worst, _gap(model, tokens, sampled, kept, temperature))
    return worst


def _gap(model: torch.nn.Module, tokens: list[int], sampled: list[int], kept: list[float], temperature: float) -> float:
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0].float()
    logprobs = torch.log_softmax(logits / max(temperature, 1e-6), dim=-1)
    # Position i's token was sampled from the distribution after position i - 1.
    recomputed = [logprobs[i - 1, tokens[i]].item() for i in sampled]
    return max(abs(a - b) for a, b in zip(recomputed, (kept[i] for i in sampled), strict=True))
