"""A hermes-nb run on the Tinker backend against a plain sequential tinker SDK loop, on one Tinker server.

The server is SkyRL tx 0.3.0 (JAX on CPU) from the ``skyrl`` side environment, serving the embedded model, started
the way the tests start it (``tests/tinker_server.py``). Both sides do the same work per step on the arithmetic
task: sample ``batch_size / group_size`` prompts ``group_size`` times, score the answers, group-normalise the
advantages, ``forward_backward`` (importance_sampling), ``optim_step``, and publish the new weights for sampling.
The plain loop does them one after the other, as a script written straight against the SDK would (its sampling
requests of one step are sent together); hermes-nb overlaps the environment's sampling of the next batch with the
trainer's step. Measured in the same run, warm (a warm-up loop compiles every shape first), plain loop before
and after the hermes-nb run, steady-state seconds per step of each. Also: seconds from ``rl_start_training()`` to
its first step.

    sh scripts/side_env.sh skyrl && .venv/bin/python bench/tinker_backend.py [--steps 8]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

BATCH_SIZE = 16
GROUP_SIZE = 4
# Two-digit additions: the answer (at most 3 digits), the end-of-sequence token and one spare, as the environment.
MAX_TOKENS = 5
LORA_RANK = 8
LEARNING_RATE = 1e-4
WARMUP_STEPS = 2
# hermes-nb's first steps include the environment's start-up evaluation and the trainer's first sampler.
SKIP_FIRST_STEPS = 2


def problems(rng: random.Random, count: int) -> list[tuple[str, str]]:
    pairs = [(rng.randint(0, 99), rng.randint(0, 99)) for _ in range(count)]
    return [(f"{a}+{b}=", str(a + b)) for a, b in pairs]


def advantages(scores: list[float]) -> list[float]:
    mean = statistics.fmean(scores)
    std = statistics.pstdev(scores)
    return [(s - mean) / (std + 1e-6) for s in scores]


def plain_step(tinker: Any, training: Any, sampler: Any, tokenizer: Any, rng: random.Random) -> Any:
    """One step of the plain loop; returns the sampler of the new weights."""
    from hermes_nb.tinker.datums import to_tinker
    from hermes_nb.trainer.types import Datum

    params = tinker.SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0, stop=[tokenizer.eos_token_id])
    groups: list[tuple[list[int], list[Any], list[float]]] = []
    # Like hermes-nb's environment, fill the batch with groups that carry a signal (a group whose scores are all
    # equal is dropped), sending the missing prompts of each round together.
    while len(groups) < BATCH_SIZE // GROUP_SIZE:
        batch = problems(rng, BATCH_SIZE // GROUP_SIZE - len(groups))
        prompts = [tokenizer.encode(prompt) for prompt, _ in batch]
        futures = [
            sampler.sample(prompt=tinker.ModelInput.from_ints(tokens=p), num_samples=GROUP_SIZE, sampling_params=params)
            for p in prompts
        ]
        for (_, answer), prompt, future in zip(batch, prompts, futures, strict=True):
            sequences = future.result().sequences
            scores = [float(tokenizer.decode(s.tokens, skip_special_tokens=True).strip() == answer) for s in sequences]
            if len(set(scores)) > 1:
                groups.append((prompt, sequences, scores))
    data = []
    for prompt, sequences, scores in groups:
        for sequence, advantage in zip(sequences, advantages(scores), strict=True):
            tokens = prompt + list(sequence.tokens)
            trained = [0.0] * (len(prompt) - 1) + [1.0] * len(sequence.tokens)
            logprobs = [0.0] * (len(prompt) - 1) + list(sequence.logprobs)
            data.append(
                Datum(
                    input_tokens_T=tokens[:-1],
                    target_tokens_T=tokens[1:],
                    weights_T=trained,
                    sampling_logprobs_T=logprobs,
                    advantages_T=[advantage] * (len(tokens) - 1),
                )
            )
    if data:
        training.forward_backward(data=to_tinker(tinker, data), loss_fn="importance_sampling").result()
        training.optim_step(adam_params=tinker.AdamParams(learning_rate=LEARNING_RATE)).result()
    return training.save_weights_and_get_sampling_client()


def plain_loop(url: str, base_model: str, steps: int, seed: int) -> list[float]:
    """Seconds of each step of the plain loop (a fresh LoRA client, as a new run would have)."""
    import tinker

    service = tinker.ServiceClient(base_url=url, api_key=os.environ["TINKER_API_KEY"])
    training = service.create_lora_training_client(base_model=base_model, rank=LORA_RANK, seed=seed)
    tokenizer = training.get_tokenizer()
    sampler = training.save_weights_and_get_sampling_client()
    rng = random.Random(seed)
    seconds = []
    for _ in range(steps):
        started = time.perf_counter()
        sampler = plain_step(tinker, training, sampler, tokenizer, rng)
        seconds.append(time.perf_counter() - started)
    return seconds


def hermes_run(url: str, steps: int) -> tuple[list[float], float]:
    """(seconds of each step, from metrics.jsonl's times; seconds from rl_start_training() to the first step)."""
    from hermes_nb.api import rl_check_status, rl_edit_config, rl_load_config, rl_select_environment, rl_start_training
    from hermes_nb.system.home import run_paths

    asyncio.run(rl_select_environment("arithmetic"))
    asyncio.run(rl_load_config(ROOT / "configs" / "quick_test.yaml"))
    edits = {"trainer.backend": "tinker", "trainer.lora_rank": LORA_RANK, "tinker.base_url": url}
    edits |= {"batch_size": BATCH_SIZE, "group_size": GROUP_SIZE, "steps_per_eval": 0, "eval_items": 1}
    edits |= {"trainer.learning_rate": LEARNING_RATE, "trainer.save_checkpoint_interval": 0, "max_num_workers": 8}
    asyncio.run(rl_edit_config(edits))
    started = time.perf_counter()
    result = asyncio.run(rl_start_training(total_steps=steps))
    metrics = run_paths(result.run_id).metrics
    first_step = None
    while not asyncio.run(rl_check_status(result.run_id)).is_terminal:
        if first_step is None and metrics.is_file() and metrics.stat().st_size > 0:
            first_step = time.perf_counter() - started
        time.sleep(0.2)
    status = asyncio.run(rl_check_status(result.run_id))
    if status.status != "completed":
        raise SystemExit(f"the hermes-nb run ended {status.status}: {status.error}")
    times = [json.loads(line)["time"] for line in metrics.read_text().splitlines()]
    return [b - a for a, b in itertools.pairwise(times)], first_step or float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="measured steps of each side")
    args = parser.parse_args()
    from tinker_server import FAKE_KEY, start_skyrl_server

    from hermes_nb.system.home import embedded_base_model_dir

    os.environ["HERMES_NB_HOME"] = tempfile.mkdtemp(prefix="hermes_nb_bench_tinker_")
    os.environ["WANDB_MODE"] = "offline"
    os.environ["TINKER_API_KEY"] = FAKE_KEY
    base = embedded_base_model_dir()
    server = start_skyrl_server(base, Path(os.environ["HERMES_NB_HOME"]) / "skyrl")
    try:
        plain_loop(server.url, str(base), WARMUP_STEPS, seed=0)  # compiles every shape both sides use
        before = plain_loop(server.url, str(base), args.steps, seed=1)
        ours, first_step = hermes_run(server.url, args.steps + SKIP_FIRST_STEPS + 1)
        after = plain_loop(server.url, str(base), args.steps, seed=2)
    finally:
        server.stop()
    report(before + after, ours[SKIP_FIRST_STEPS:], first_step, args.steps)


def report(plain: list[float], ours: list[float], first_step: float, steps: int) -> None:
    from report import append_run, run_block

    plain_s, ours_s = statistics.median(plain), statistics.median(ours)
    lines = [
        f"server: SkyRL tx 0.3.0, JAX CPU, embedded model, LoRA rank {LORA_RANK}; {os.cpu_count()} cores",
        f"per step: {BATCH_SIZE} sequences ({BATCH_SIZE // GROUP_SIZE} prompts x {GROUP_SIZE}), <= {MAX_TOKENS} tokens",
        f"plain sequential SDK loop: {plain_s:.2f} s/step (median of {len(plain)}: {steps} before, {steps} after)",
        f"hermes-nb on the Tinker backend: {ours_s:.2f} s/step (median of {len(ours)} steady-state steps)",
        f"ratio hermes-nb / plain: {ours_s / plain_s:.2f} (target <= 0.7)",
        f"rl_start_training() to the first step: {first_step:.1f} s",
    ]
    print("\n".join(lines))
    intro = (
        "Seconds per training step of a hermes-nb run on the Tinker backend against a plain sequential tinker SDK "
        "loop doing the same work per step, on the same SkyRL server in the same run (`bench/tinker_backend.py`).\n"
    )
    append_run("## Tinker backend", intro, run_block(".venv/bin/python bench/tinker_backend.py", lines))


if __name__ == "__main__":
    main()
