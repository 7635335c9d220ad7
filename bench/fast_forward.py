"""The lean forward (``hermes_nb/inference/fast_forward.py``) against the transformers forward on a Qwen3 of the
embedded chat model's size: sampler tokens per second and one packed training step (forward, backward, AdamW).

Both paths run the same seeded random-init weights in the same process, alternating (A, B, A, B, ...), on one
torch thread; the figures are medians and their ratio. Time is the thread's CPU time by default (``--clock cpu``:
on a shared machine it counts what this work costs, not the time other processes held the core), or wall time
(``--clock wall``). The workload is one GRPO step of an agent episode:
``--prompts`` distinct prompts of ``--prompt-tokens`` tokens (system text and the tools block make prompts long),
each sampled ``--samples`` times for ``--new-tokens`` tokens (no stop token, so every row runs its whole budget),
then trained on as packed data (each prompt once in a KV cache, every completion on top of it).

    .venv/bin/python bench/fast_forward.py [--repeats 5] [--threads 1] [--clock cpu|wall] [--model-dir DIR]

``--model-dir`` runs a saved model (with its tokenizer) instead of the random-init Qwen3 of ``SHAPE``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from hermes_nb.inference import sampler
from hermes_nb.system.home import embedded_base_model_dir
from hermes_nb.testing import TOKENIZER_FILES
from hermes_nb.trainer.local import local_backend
from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.types import AdamParams, Datum

# The shape the issue names for the embedded chat model; intermediate 3x hidden as in the shipped base model.
SHAPE: dict[str, Any] = {
    "vocab_size": 1024,
    "hidden_size": 192,
    "intermediate_size": 576,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": True,
    "pad_token_id": 0,
}
# With one torch thread every operation runs on the calling thread, so its CPU time is the work's.
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.thread_time, "wall": time.perf_counter}
PATHS: dict[str, Callable[[Any], Any]] = {"fast": sampler._FastStepper, "transformers": sampler._TransformersStepper}


def write_model(directory: Path) -> Path:
    """A seeded random-init Qwen3 of ``SHAPE`` with the shipped tokenizer (the local backend loads both)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    Qwen3ForCausalLM(Qwen3Config(**SHAPE)).save_pretrained(directory)
    for name in TOKENIZER_FILES:
        if (embedded_base_model_dir() / name).is_file():
            shutil.copyfile(embedded_base_model_dir() / name, directory / name)
    return directory


def prompts(args: argparse.Namespace) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(1, args.vocab_size) for _ in range(args.prompt_tokens)] for _ in range(args.prompts)]


def time_sampling(model: Any, path: str, args: argparse.Namespace) -> float:
    """Seconds for one batched generation of every prompt x samples rows."""
    rows = [
        sampler.SampleRow(prompt=p, max_tokens=args.new_tokens, temperature=1.0)
        for p in prompts(args)
        for _ in range(args.samples)
    ]
    sampler.stepper_for = PATHS[path]  # type: ignore[assignment]  # the one switch between the two paths
    clock = CLOCKS[args.clock]
    start = clock()
    sampler.generate(model, rows, pad_id=0, decode=str, generator=torch.Generator().manual_seed(0))
    return clock() - start


def batch(args: argparse.Namespace) -> list[Datum]:
    """Every prompt with ``samples`` distinct completions; advantages of both signs, as a GRPO group has."""
    rng = random.Random(1)
    data = []
    for prompt in prompts(args):
        for _ in range(args.samples):
            tokens = prompt + [rng.randrange(1, args.vocab_size) for _ in range(args.new_tokens)]
            trained = [t + 1 >= len(prompt) for t in range(len(tokens) - 1)]
            data.append(
                Datum(
                    input_tokens_T=tokens[:-1],
                    target_tokens_T=tokens[1:],
                    weights_T=[1.0 if t else 0.0 for t in trained],
                    sampling_logprobs_T=[-7.0] * len(trained),
                    advantages_T=[rng.choice([-1.0, 1.0])] * len(trained),
                )
            )
    return data


def time_training_step(backend: LocalBackend, path: str, data: list[Datum], clock: Callable[[], float]) -> float:
    local_backend.stepper_for = PATHS[path]  # type: ignore[assignment]
    start = clock()
    backend.forward_backward(data, "importance_sampling")
    backend.optim_step(AdamParams(learning_rate=1e-5))
    return clock() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=96)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--model-dir", type=Path, default=None)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as folder:
        model_dir = args.model_dir or write_model(Path(folder))
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
        args.vocab_size, args.shape = model.config.vocab_size, model.config.to_diff_dict()
        backends = {path: LocalBackend(model_dir) for path in PATHS}
        data = batch(args)
        sampling: dict[str, list[float]] = {path: [] for path in PATHS}
        training: dict[str, list[float]] = {path: [] for path in PATHS}
        for path in PATHS:  # warm-up: first calls pay for allocations and lazy imports
            time_sampling(model, path, args)
            time_training_step(backends[path], path, data, CLOCKS[args.clock])
        for _ in range(args.repeats):
            for path in PATHS:
                sampling[path].append(time_sampling(model, path, args))
                training[path].append(time_training_step(backends[path], path, data, CLOCKS[args.clock]))
    report(args, sampling, training)


def report(args: argparse.Namespace, sampling: dict[str, list[float]], training: dict[str, list[float]]) -> None:
    generated = args.prompts * args.samples * args.new_tokens
    sizes = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
    shape = {name: args.shape.get(name) for name in (*sizes, "head_dim", "vocab_size")}
    print(f"{args.shape.get('architectures') or 'random-init Qwen3ForCausalLM'} {shape}")
    print(
        f"{args.prompts} prompts x {args.samples} samples, {args.prompt_tokens} prompt + {args.new_tokens} new tokens; "
        f"{args.threads} thread(s), {args.repeats} repeats, {args.clock} time, load {os.getloadavg()[0]:.1f}"
    )
    for path in PATHS:
        seconds, step = statistics.median(sampling[path]), statistics.median(training[path])
        print(f"{path:>12}: sampling {generated / seconds:7.0f} tokens/s (median {seconds * 1000:.0f} ms, "
              f"min {min(sampling[path]) * 1000:.0f})   training step median {step * 1000:.0f} ms "
              f"(min {min(training[path]) * 1000:.0f})")  # fmt: skip
    # Each repeat runs both paths back to back: the ratio within a pair cancels most of a drifting load.
    speedup = statistics.median(t / f for t, f in zip(sampling["transformers"], sampling["fast"], strict=True))
    step_ratio = statistics.median(f / t for f, t in zip(training["fast"], training["transformers"], strict=True))
    print(f"fast / transformers (median of pairs): sampling {speedup:.2f}x tokens/s, step {step_ratio:.2f}x the time")


if __name__ == "__main__":
    main()
