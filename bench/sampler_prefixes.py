"""Milliseconds of the native sampler for one GRPO wave: 2-digit addition prompts, 16 samples each, as a quickstart run
sends them (temperature 1, at most 5 tokens, newline stop), 1 torch thread, in process.

The figure depends on how peaked the policy is: the sampler runs the model once per distinct prefix, so a policy
that has learned something (a quickstart checkpoint) shares more of its samples' first tokens than the base model.
``--model`` takes any ``from_pretrained`` directory, e.g. ``HOME/runs/RUN/checkpoints/step_100`` of a quickstart
run; the default is the embedded base model. Against the code before a change, on the same machine, alternating:

    .venv/bin/python bench/trees.py --before OLD_CHECKOUT --rounds 3 --keep "groups" -- sampler_prefixes.py \\
        --model CHECKPOINT
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

from hermes_nb.inference.sampler import SampleRow, device_generator, generate
from hermes_nb.system.home import embedded_base_model_dir

GROUP_SIZE = 16


def wave(tokenizer: object, groups: int, rng: random.Random) -> list[SampleRow]:
    rows = []
    for _ in range(groups):
        prompt = tokenizer(f"{rng.randint(10, 99)}+{rng.randint(10, 99)}=")["input_ids"]  # type: ignore[operator]
        rows += [SampleRow(prompt=list(prompt), max_tokens=5, stop_strings=("\n",))] * GROUP_SIZE
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(embedded_base_model_dir()))
    parser.add_argument("--groups", type=int, nargs="+", default=[8, 24])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    generator = device_generator(torch.device("cpu"), 0)
    rng = random.Random(0)

    def decode(ids: list[int]) -> str:
        return str(tokenizer.decode(ids, skip_special_tokens=True))

    generate(model, wave(tokenizer, 2, rng), pad_id=0, decode=decode, generator=generator)  # warm-up
    for groups in args.groups:
        seconds = []
        for _ in range(args.repeats):
            rows = wave(tokenizer, groups, rng)
            started = time.perf_counter()
            generate(model, rows, pad_id=0, decode=decode, generator=generator)
            seconds.append(time.perf_counter() - started)
        print(f"{groups} groups of {GROUP_SIZE}: median {1000 * statistics.median(seconds):.1f} ms", flush=True)


if __name__ == "__main__":
    main()
