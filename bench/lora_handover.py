"""How long a LoRA trainer takes to hand its sampler merged weights after a step, and what it holds meanwhile: the
adapted layers merged one at a time into the state dict it hands over (``LocalBackend.save_weights_for_sampler``)
against the copy-and-merge it replaced (a deep copy of the model, cast to float32, peft's ``merge_and_unload``,
its state dict copied), alternating, on a scale-ladder rung (``bench/scale.py``'s models, LoRA rank 16, float32
on the CPU). Memory: how far each way's first measured call raises the process's peak resident set (``VmHWM``,
reset before it), after one call of each has read the lazily loaded weights.

    .venv/bin/python bench/lora_handover.py [--rung 500M] [--rounds 3]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale


def reset_peak() -> None:
    """Set the process's peak resident set to its current one (Linux: ``clear_refs`` 5)."""
    Path("/proc/self/clear_refs").write_text("5", encoding="ascii")


def peak_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def copy_and_merge(backend: Any) -> dict[str, Any]:
    """The hand-over before: a float32 deep copy of the model with the adapters merged, its state dict copied."""
    import torch

    from hermes_nb.trainer.local.local_backend import cast_weights

    merged = cast_weights(copy.deepcopy(backend.model), torch.float32).merge_and_unload()
    return {key: tensor.detach().to(copy=True) for key, tensor in merged.state_dict().items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rung", default="500M", choices=list(scale.RUNGS))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from hermes_nb.trainer.local.local_backend import LocalBackend

    with tempfile.TemporaryDirectory() as scratch:
        backend = LocalBackend(scale.make_rung(Path(scratch), args.rung), lora_rank=scale.LORA_RANK)
        ways = {
            "merged layer by layer": lambda: backend.save_weights_for_sampler("bench").policy,
            "copy and merge (before)": lambda: copy_and_merge(backend),
        }
        seconds: dict[str, list[float]] = {name: [] for name in ways}
        growth: dict[str, float] = {}
        for hand_over in ways.values():
            hand_over()  # the model's weights read once (loaded lazily from disk), so neither way pays for it
        for _ in range(args.rounds):
            for name, hand_over in ways.items():
                reset_peak()
                before = peak_mib()
                started = time.perf_counter()
                weights = hand_over()
                seconds[name].append(time.perf_counter() - started)
                growth.setdefault(name, peak_mib() - before)  # the first measured call's
                del weights
    for name, values in seconds.items():
        print(
            f"{args.rung} {name:24s} median {statistics.median(values):.2f} s {[round(v, 2) for v in values]}; "
            f"peak resident set grew {growth[name]:.0f} MiB on its first call"
        )


if __name__ == "__main__":
    main()
