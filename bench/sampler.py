"""The native sampler against vLLM (``trainer.sampler``), engine against engine, at three model sizes: tokens per
second of one GRPO wave of groups, and the sampler's share of a step (a weight update, then that wave).

Both engines are the ones a run uses (``InferenceEngine``, ``VLLMEngine``), in one process, on the same weights,
alternating (native, vLLM, native, ...); the figures are medians. The models are Qwen3s built on the fly with the
shipped chat model's tokenizer: the chat model itself (~1M parameters), ~20M and ~120M. Each round publishes new
weights (every parameter nudged, as a training step would) and samples ``--prompts`` distinct prompts
``--samples`` times each for ``--new-tokens`` tokens (no stop token: every row runs its whole budget).

Runs under the vLLM side environment's Python (it needs vllm; the native engine runs there too):

    PYTHONPATH=. .venvs/vllm/bin/python bench/sampler.py [--repeats 3] [--device cpu|cuda] [--sizes chat 20m 120m]

On a GPU, ``--device cuda`` (and a venv with ``pip install vllm``) runs the same comparison there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from hermes_nb.config import TrainerConfig, base_model_dir
from hermes_nb.inference.contract import Policy
from hermes_nb.inference.engine import InferenceEngine
from hermes_nb.inference.sampler import SampleRow
from hermes_nb.inference.vllm_engine import VLLMEngine

# (hidden, layers, heads, kv heads, intermediate) of the two sizes built here; "chat" is the shipped model.
SHAPES = {"20m": (512, 6, 8, 4, 1536), "120m": (1024, 9, 16, 8, 3072)}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")


def model_dir(size: str, root: Path) -> Path:
    chat = base_model_dir("embedded-chat")
    if size == "chat":
        return chat
    from transformers import AutoConfig, AutoModelForCausalLM

    hidden, layers, heads, kv_heads, intermediate = SHAPES[size]
    config = AutoConfig.from_pretrained(chat)
    config.update(
        {
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": kv_heads,
            "head_dim": hidden // heads,
            "intermediate_size": intermediate,
            "layer_types": ["full_attention"] * layers,
        }
    )
    torch.manual_seed(0)
    target = root / size
    AutoModelForCausalLM.from_config(config).save_pretrained(target)
    for name in TOKENIZER_FILES:
        if (chat / name).is_file():
            shutil.copy(chat / name, target / name)
    return target


def rows(tokenizer: Any, prompts: int, samples: int, new_tokens: int) -> list[SampleRow]:
    texts = [f"What is {11 * i + 3} + {7 * i + 5}? Answer with the number." for i in range(prompts)]
    return [
        SampleRow(prompt=list(tokenizer.encode(text)), max_tokens=new_tokens) for text in texts for _ in range(samples)
    ]


async def one_round(engine: Any, weights: dict[str, torch.Tensor], version: int, batch: list[SampleRow]) -> float:
    started = time.perf_counter()
    engine.publish_weights(weights, version)
    await engine.sample(batch)
    return time.perf_counter() - started


async def bench_size(size: str, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    from hermes_nb.trainer.local.local_backend import LocalBackend

    directory = model_dir(size, root)
    backend = LocalBackend(directory, device=args.device, dtype="auto")
    parameters = sum(p.numel() for p in backend.model.parameters())
    engines: dict[str, Any] = {
        "native": InferenceEngine(seed=0),
        "vllm": VLLMEngine(
            directory,
            gpu_memory_utilization=TrainerConfig().vllm_gpu_memory_utilization,
            device=args.device,
            dtype="auto",
            seed=0,
        ),
    }
    for engine in engines.values():
        engine.publish(Policy(model=backend.sampler_model(), tokenizer=backend.tokenizer, version=0, name=size))
    batch = rows(backend.tokenizer, args.prompts, args.samples, args.new_tokens)
    tokens = len(batch) * args.new_tokens
    times: dict[str, list[float]] = {name: [] for name in engines}
    base = backend.sampler_model().state_dict()
    for version in range(1, args.repeats + 2):  # round 1 warms both engines up and is not counted
        for name, engine in engines.items():
            weights = {k: v * (1 + 1e-3 * version) if v.is_floating_point() else v for k, v in base.items()}
            elapsed = await one_round(engine, weights, version, batch)
            if version > 1:
                times[name].append(elapsed)
    for engine in engines.values():
        engine.close()
    result: dict[str, Any] = {"size": size, "parameters": parameters, "rows": len(batch), "tokens": tokens}
    for name, measured in times.items():
        median = statistics.median(measured)
        result[name] = {"s_per_step": round(median, 3), "tokens_per_s": round(tokens / median)}
    result["vllm_over_native"] = round(result["vllm"]["tokens_per_s"] / result["native"]["tokens_per_s"], 2)
    return result


def main() -> None:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # vLLM logs to stdout, where the figures go
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", nargs="+", default=["chat", "20m", "120m"], choices=["chat", *SHAPES])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-sampler-") as root:
        for size in args.sizes:
            print(json.dumps(asyncio.run(bench_size(size, Path(root), args))), flush=True)


if __name__ == "__main__":
    main()
