"""The scale ladder: how a step's time and memory grow with the model, hermes-nb against TRL's ``GRPOTrainer``.

Rungs of random-weight Qwen3 models (``RUNGS``: ~4M, ~30M, ~120M over the shipped base model's tokenizer and a
vocabulary of its 100 ids; ~500M with Qwen3-0.6B's widths and its 151,936-row vocabulary, 22 of its 28 layers),
each full fine-tune and LoRA (rank 16), float32 on the CPU. The learning problem is ``bench/vs_trl.py``'s (2-digit
addition, group 16, 128 completions a step, at most 5 completion tokens, the quickstart's learning rate); hermes-nb
runs through ``rl_start_training`` (trainer, sampler child, API, environment: a real run), TRL in a child process
of its own, the two alternating at each rung and mode, ``--rounds`` times.

Figures: median seconds per step (steps 2 to ``--steps``; TRL's from its ``on_step_end`` clock), trained tokens
per second (hermes-nb's ``train/tokens_per_second``), the peak resident memory of hermes-nb's trainer process and
of its sampler child (``VmHWM``, read just before the run is stopped) and of TRL's process (its ``ru_maxrss``;
TRL samples in the process that trains), and the memory model's prediction for the trainer
(``hermes_nb.trainer.local.memory_model``, its peak without the sampler).

    .venv/bin/python bench/scale.py [--rungs 4M 30M 120M 500M] [--modes full lora] [--steps 5] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "environments"))

from vs_trl import BATCH_SIZE, GROUP_SIZE, grpo_config  # noqa: E402  (the race's shape and TRL config)

# The learning problem: vs_trl.py's shape (group 16, 128 completions a step, at most 5 completion tokens).
MAX_COMPLETION = 5
LEARNING_RATE = 1e-4

LORA_RANK = 16
# name -> Qwen3 sizes (hidden, intermediate, layers, heads, kv heads, vocabulary); head size 64, or 128 as
# Qwen3-0.6B has it.
RUNGS: dict[str, dict[str, int]] = {
    "4M": {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 5, "num_attention_heads": 4},
    "30M": {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 10, "num_attention_heads": 8},
    "120M": {"hidden_size": 768, "intermediate_size": 2304, "num_hidden_layers": 16, "num_attention_heads": 12},
    "500M": {
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 22,
        "num_attention_heads": 16,
        "head_dim": 128,
        "vocab_size": 151_936,
    },
}
MiB = 1 << 20
# The shipped base model's tokenizer: its ids, and how far apart a wide random model's logits of them are put.
TOKENIZER_IDS = 100
TOKENIZER_LOGIT_SPREAD = 4.3


def sample_the_tokenizers_ids(model: Any) -> None:
    """Make a random model with a vocabulary wider than the tokenizer sample the tokenizer's ids, as a trained one
    would: the output rows past them zeroed (logit 0) and the tokenizer's rows scaled so that their logits spread
    ~4 wide (the 100 of them then outweigh the other 151,836 together, and still differ from each other). Without
    it a random 151,936-row model almost never samples an id the tokenizer has, every completion scores 0, and no
    group carries a signal (the run's health check said so: ``no_signal`` at step 0). The rows' count, and so the
    logits' memory and compute, stay the rung's."""
    import torch

    head = model.get_output_embeddings().weight
    with torch.no_grad():
        head[TOKENIZER_IDS:] = 0.0
        head[:TOKENIZER_IDS] *= TOKENIZER_LOGIT_SPREAD / float(head[:TOKENIZER_IDS].std() * head.shape[1] ** 0.5)


def make_rung(directory: Path, rung: str) -> Path:
    """A random-init Qwen3 of ``rung``'s sizes with the shipped base model's tokenizer, written to ``directory``."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from hermes_nb.system.home import embedded_base_model_dir
    from hermes_nb.testing import TOKENIZER_FILES

    sizes = {"vocab_size": TOKENIZER_IDS, "head_dim": 64, **RUNGS[rung]}
    sizes.setdefault("num_key_value_heads", sizes["num_attention_heads"] // 2)  # grouped-query, as Qwen3
    config = Qwen3Config(
        max_position_embeddings=4096, tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2, **sizes
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    if config.vocab_size > TOKENIZER_IDS:
        sample_the_tokenizers_ids(model)
    model.save_pretrained(directory)
    source = embedded_base_model_dir()
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, directory / name)
    return directory


# ---- hermes-nb ----------------------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    """Every thread's children: the sampler is forked by a thread other than the main one."""
    return [int(c) for path in Path(f"/proc/{pid}/task").glob("*/children") for c in path.read_text().split()]


def _peak_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def trainer_pid(run_id: str) -> int | None:
    """The run's trainer process, as its run state records it (its forked sampler is its child)."""
    from hermes_nb.protocol.run_state import read_run_state
    from hermes_nb.system.home import run_paths

    record = read_run_state(run_paths(run_id).run_dir).processes.get("trainer")
    return record.pid if record is not None else None


def start_run(model_dir: Path, lora: bool) -> Any:
    """Start hermes-nb's side through the public API, on ``bench/environments/digits.py``."""
    from hermes_nb.api import rl_select_environment, rl_start_training

    asyncio.run(rl_select_environment("scale_digits"))
    fields = {
        "group_size": GROUP_SIZE,
        "batch_size": BATCH_SIZE,
        "temperature": 1.0,
        "total_steps": 2000,  # stopped by the bench
        "steps_per_eval": 100_000,  # no evaluation: the ladder times the steps
        "trainer.learning_rate": LEARNING_RATE,
        "trainer.max_grad_norm": 1.0,
        "trainer.save_checkpoint_interval": 0,
        "trainer.base_model": str(model_dir),
        "trainer.lora_rank": LORA_RANK if lora else 0,
    }
    return asyncio.run(rl_start_training(**fields))


def run_hermes(model_dir: Path, lora: bool, steps: int) -> dict[str, float]:
    from learning import read_rows

    from hermes_nb.api import rl_check_status, rl_stop_training
    from hermes_nb.protocol import metrics as keys
    from hermes_nb.system.home import run_paths

    started = start_run(model_dir, lora)
    figures: dict[str, float] = {}
    try:
        while (status := asyncio.run(rl_check_status(started.run_id))).step < steps:
            if status.is_terminal:
                raise SystemExit(f"hermes-nb's run ended at step {status.step}: {status.status} {status.error}")
            time.sleep(0.5)
        pid = trainer_pid(str(started.run_id))
        if pid is not None:
            figures["trainer_peak_mib"] = _peak_bytes(pid) / MiB
            figures["sampler_peak_mib"] = max((_peak_bytes(c) for c in _children(pid)), default=0) / MiB
    finally:
        asyncio.run(rl_stop_training(started.run_id))
    figures.update(estimated(str(started.run_id)))
    rows = read_rows(run_paths(started.run_id).metrics)[1:steps]
    figures["s_per_step"] = statistics.median(r["values"][keys.TRAIN_STEP_SECONDS] for r in rows)
    figures["train_tokens_per_s"] = statistics.median(r["values"][keys.TRAIN_TOKENS_PER_SECOND] for r in rows)
    return figures


def estimated(run_id: str) -> dict[str, float]:
    """What ``rl_estimate_run`` says of this run's config, as a user sees it before starting: seconds a step and
    the trainer process's memory."""
    from hermes_nb.config import RunConfig
    from hermes_nb.runs.estimate import estimate_config
    from hermes_nb.system.home import run_paths

    path = run_paths(run_id).run_dir / "config.yaml"
    estimate = estimate_config(RunConfig.from_yaml_text(path.read_text(encoding="utf-8"), str(path)))
    trainer = next(p.bytes for p in estimate.processes if p.process == "trainer")
    return {"estimate_s_per_step": estimate.seconds_per_step or 0.0, "estimate_trainer_mib": trainer / MiB}


# ---- TRL (a child process: its peak memory is its own) ------------------------------------------------------


def trl_child(model_dir: Path, lora: bool, steps: int) -> None:
    import torch
    from datasets import Dataset
    from digits import DigitsEnv
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from hermes_nb.env import BaseEnvConfig

    env = DigitsEnv(BaseEnvConfig(group_size=GROUP_SIZE))
    rng = random.Random(0)
    items = [env.generate_problem(rng) for _ in range(steps * BATCH_SIZE // GROUP_SIZE)]
    prompts = [item.prompt for item in items]

    def reward(prompts: list[str], completions: list[str], answer: list[str], **_: Any) -> list[float]:
        # The environment's own reward, as hermes-nb's run scores the completions.
        return [env.score_completion(c, a) for c, a in zip(completions, answer, strict=True)]

    ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            ends.append(time.perf_counter())

    peft_config = None
    if lora:
        import peft

        peft_config = peft.LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK)  # peft's targets, as hermes-nb's
    with tempfile.TemporaryDirectory() as out:
        config = grpo_config(
            out,
            learning_rate=LEARNING_RATE,
            temperature=1.0,
            max_completion_length=env.max_completion_tokens(),
            max_steps=steps,
        )
        GRPOTrainer(
            model=AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32),
            reward_funcs=reward,
            args=config,
            train_dataset=Dataset.from_dict({"prompt": prompts, "answer": [item.answer for item in items]}),
            processing_class=AutoTokenizer.from_pretrained(str(model_dir)),
            peft_config=peft_config,
            callbacks=[Clock()],
        ).train()
    gaps = [b - a for a, b in itertools.pairwise(ends)]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MiB
    print(json.dumps({"s_per_step": statistics.median(gaps), "peak_mib": peak}))


def run_trl(model_dir: Path, lora: bool, steps: int) -> dict[str, float]:
    command = [sys.executable, __file__, "--trl-child", str(model_dir), "--steps", str(steps)]
    out = subprocess.run([*command, *(["--lora"] if lora else [])], capture_output=True, text=True, check=True)
    figures: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


# ---- the ladder ---------------------------------------------------------------------------------------------


def predicted_mib(model_dir: Path, lora: bool) -> float:
    from hermes_nb.trainer.local.memory_model import StepShape, estimate, model_sizes

    # The longest arithmetic prompt is ~12 tokens of the base tokenizer; with the completion, 20 is an upper bound.
    shape = StepShape(sequences=BATCH_SIZE, sequence_tokens=15 + MAX_COMPLETION, lora_rank=LORA_RANK if lora else 0)
    return estimate(model_sizes(model_dir), shape).trainer_peak / MiB


def one_rung(rung: str, mode: str, args: argparse.Namespace, scratch: Path) -> list[str]:
    model_dir = scratch / rung
    if not model_dir.is_dir():
        make_rung(model_dir, rung)
    lora = mode == "lora"
    lines = []
    for round_ in range(args.rounds):
        ours = run_hermes(model_dir, lora, args.steps)
        trl = run_trl(model_dir, lora, args.steps)
        load, predicted = os.getloadavg()[0], predicted_mib(model_dir, lora)
        lines.append(
            f"{rung} {mode} round {round_ + 1} (load {load:.1f}): hermes-nb {ours['s_per_step']:.3f} s/step, "
            f"{ours['train_tokens_per_s']:.0f} trained tok/s, trainer peak {ours.get('trainer_peak_mib', 0):.0f} MiB "
            f"(memory model {predicted:.0f}), sampler peak {ours.get('sampler_peak_mib', 0):.0f} MiB"
            f" | estimate {ours['estimate_s_per_step']:.3f} s/step, trainer {ours['estimate_trainer_mib']:.0f} MiB"
            f" | TRL {trl['s_per_step']:.3f} s/step, peak {trl['peak_mib']:.0f} MiB"
            f" | TRL/hermes-nb time {trl['s_per_step'] / ours['s_per_step']:.2f}x"
        )
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rungs", nargs="+", default=list(RUNGS), choices=list(RUNGS))
    parser.add_argument("--modes", nargs="+", default=["full", "lora"], choices=["full", "lora"])
    parser.add_argument("--steps", type=int, default=5, help="steps per side; the median is over steps 2 to this")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--trl-child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--lora", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trl_child is not None:
        trl_child(args.trl_child, args.lora, args.steps)
        return
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ["HERMES_NB_ENV_PATH"] = str(ROOT / "bench" / "environments")  # digits.py
    os.environ["HERMES_NB_WARM_START"] = "0"  # every rung starts as the first run of a kernel does, cold
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as scratch:
        os.environ["HERMES_NB_HOME"] = home
        for rung in args.rungs:
            for mode in args.modes:
                one_rung(rung, mode, args, Path(scratch))


if __name__ == "__main__":
    main()
