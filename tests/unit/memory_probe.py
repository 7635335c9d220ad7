"""Run as ``python memory_probe.py MODEL_DIR SEQUENCES TOKENS``: two local-backend steps on random sequences; prints
the process's resident memory before the model loads and its peak after, in bytes, as JSON.

A process of its own, so the peak is this step's alone: resident memory is what the OS gives the process, and on
the CPU torch's allocator keeps no statistics of its own (``torch.cuda.max_memory_allocated`` has no CPU twin).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401 - their import is not the step's memory

from hermes_nb.trainer.local.local_backend import LocalBackend
from hermes_nb.trainer.types import AdamParams, Datum


def resident_bytes() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def batch(sequences: int, tokens: int) -> list[Datum]:
    generator = torch.Generator().manual_seed(0)
    data = []
    for _ in range(sequences):
        ids = torch.randint(3, 90, (tokens + 1,), generator=generator).tolist()
        data.append(
            Datum(
                input_tokens_T=ids[:-1],
                target_tokens_T=ids[1:],
                weights_T=[0.0] * 8 + [1.0] * (tokens - 8),
                sampling_logprobs_T=[-5.0] * tokens,
                advantages_T=[1.0] * tokens,
            )
        )
    return data


def main() -> None:
    model_dir, sequences, tokens = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    data = batch(sequences, tokens)
    before = resident_bytes()
    backend = LocalBackend(model_dir)
    for _ in range(2):  # the second step's backward pass holds the Adam moments too
        backend.forward_backward(data, "importance_sampling")
        backend.optim_step(AdamParams(learning_rate=1e-5))
    # VmHWM, this address space's own high-water mark: getrusage's ru_maxrss survives fork and exec, so under a
    # pytest process larger than this step it reported the parent's peak (1.9 GB against 0.6).
    peak = next(
        int(line.split()[1]) * 1024
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmHWM:")
    )
    print(json.dumps({"before": before, "peak": peak}))


if __name__ == "__main__":
    main()
