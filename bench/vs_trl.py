"""hermes-nb against TRL's ``GRPOTrainer``: seconds per step and wall-clock to the same held-out accuracy.

Back to back in one process run on this machine, same everything that defines the learning problem:

- base model: the embedded one (``hermes_nb.system.home.embedded_base_model_dir()``), loaded from disk, float32;
- task and reward: ``environments/arithmetic.py`` (2-digit addition), reward = its ``score_completion``;
  TRL's training prompts come from the same training generator (``train_item``), built in memory;
- group size 16 (TRL ``num_generations``), 128 completions = 8 prompts per step, the same learning rate
  (constant; Adam, grad-norm clip 1.0, no KL term), temperature 1.0, max completion length 5 tokens
  (``max_completion_tokens``), group-normalised advantages, token-mean loss (TRL ``loss_type='dapo'``);
- evaluation: the same 200 held-out items (``eval_items`` of the environment's config with the run's seed),
  greedy, every ``--eval-every`` steps. The start accuracy is measured once per seed, in process, on the base
  model, and the target is start + ``--lift`` points for both. hermes-nb evaluates through its environment: one
  batched request, answered by one policy version, which the row names (``eval/policy_step``); TRL's model is
  evaluated by a ``TrainerCallback`` with ``generate`` (greedy, batched, cut at the newline stop like the
  environment).

Clock: from the end of the first trainer step. TRL: the callback times its own evaluations and they are
subtracted, so TRL is not charged for being measured. hermes-nb: the time at which the trainer finished the
step whose weights the evaluation measured (``metrics.jsonl``), so nothing is subtracted and the evaluations'
cost (they share the CPU with training) is charged to hermes-nb. Several seeds; the verdict is on the median
ratio.

``--from-call`` also starts both clocks when the user asks for a run, start-up included: TRL's at building the
``GRPOTrainer`` (its config and dataset included) in a process that has the model and tokenizer loaded already,
as a notebook user has them; hermes-nb's at ``rl_start_training``, three runs per seed, each in a fresh home:
cold-first (the first run of a kernel with warm starts off, ``HERMES_NB_WARM_START=0``), warm-first (the first run
of a kernel with them on: the environment selected, ``--pause`` seconds, then the start, as a user who selects and
then starts), and warm (the kit the previous start left, ready). The after-start-up ratio is then the cold run's.

    .venv/bin/python bench/vs_trl.py [--seeds 0 1 2] [--lift 15] [--eval-every 10] [--max-seconds 240]
                                     [--from-call [--pause 10]] [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "environments"))
sys.path.insert(0, str(ROOT / "bench"))

import arithmetic  # noqa: E402  (the shipped environment, used in process for its items and checker)
from learning import QUICKSTART_BENCH, read_rows  # noqa: E402

T = TypeVar("T")

GROUP_SIZE = 16
BATCH_SIZE = 128  # completions per step: 8 prompts x 16
TEMPERATURE = 1.0
EVAL_ITEMS = 200


def task(seed: int) -> arithmetic.ArithmeticEnv:
    """The environment with the run's seed (it picks the training and held-out items); it contacts no server."""
    return arithmetic.ArithmeticEnv(
        arithmetic.ArithmeticConfig(operation="add", digits=2, eval_items=EVAL_ITEMS, seed=seed)
    )


# The completion budget, the checker and the verdict are the same for every seed.
MAX_COMPLETION = task(0).max_completion_tokens()
score_completion = task(0).score_completion
is_correct = task(0).is_correct


@dataclass
class Curve:
    """Held-out accuracy against steps and seconds since the first step."""

    name: str
    start: float = 0.0
    points: list[tuple[int, float, float]] = field(default_factory=list)  # step, seconds, accuracy
    seconds_per_step: float = 0.0
    load: float = 0.0
    # Seconds from the user's call (building the trainer, rl_start_training) to the end of the first step.
    startup: float = 0.0

    def reach(self, target: float) -> tuple[int, float] | None:
        return next(((step, s) for step, s, acc in self.points if acc >= target - 1e-9), None)

    def reach_from_call(self, target: float) -> float | None:
        hit = self.reach(target)
        return None if hit is None else self.startup + hit[1]


# ---- the shared learning rate -------------------------------------------------------------------------------


def quickstart_learning_rate() -> float:
    from hermes_nb.config import RunConfig

    return RunConfig.load(QUICKSTART_BENCH.config).trainer.learning_rate


# ---- hermes-nb ----------------------------------------------------------------------------------------------


def race_overrides(seed: int, lr: float, eval_every: int) -> dict[str, Any]:
    """hermes-nb's side of the race: the quickstart config (selected and loaded first) with these fields set."""
    return {
        "group_size": GROUP_SIZE,
        "batch_size": BATCH_SIZE,
        "temperature": TEMPERATURE,
        "operation": "add",
        "digits": 2,
        "eval_items": EVAL_ITEMS,
        "steps_per_eval": eval_every,
        "total_steps": 2000,  # stopped by the bench at the target or the time limit
        "env.seed": seed,
        "trainer.seed": seed,
        "trainer.learning_rate": lr,
        "trainer.max_grad_norm": 1.0,
        "trainer.save_checkpoint_interval": 0,
    }


def start_race(seed: int, lr: float, eval_every: int, **fields: Any) -> tuple[Any, float]:
    """Start hermes-nb's side of the race (``fields`` set on top of it) through the public API: the start's
    result, and when ``rl_start_training`` was called (``time.time()``, the clock of ``metrics.jsonl``)."""
    from hermes_nb.api import rl_load_config, rl_select_environment, rl_start_training

    asyncio.run(rl_select_environment("arithmetic"))
    asyncio.run(rl_load_config(QUICKSTART_BENCH.config))
    called = time.time()
    return asyncio.run(rl_start_training(**race_overrides(seed, lr, eval_every), **fields)), called


def race_to_step(seed: int, steps: int, eval_every: int = 10, **fields: Any) -> str:
    """Run the race's config (the quickstart's learning rate) until trainer step ``steps``, then stop it; its id."""
    from hermes_nb.api import rl_check_status, rl_stop_training

    started, _ = start_race(seed, quickstart_learning_rate(), eval_every, **fields)
    try:
        while (status := asyncio.run(rl_check_status(started.run_id))).step < steps:
            if status.is_terminal:
                raise SystemExit(f"the run ended at step {status.step}: {status.status} {status.error}")
            time.sleep(0.2)
    finally:
        asyncio.run(rl_stop_training(started.run_id))
    return str(started.run_id)


def run_hermes(seed: int, lr: float, eval_every: int, target: float, max_seconds: float) -> Curve:
    from hermes_nb.api import rl_check_status, rl_stop_training
    from hermes_nb.system.home import run_paths

    started, called = start_race(seed, lr, eval_every)
    paths = run_paths(started.run_id)
    try:
        while True:
            time.sleep(0.5)
            curve = hermes_curve(paths, called)
            if curve is not None and (curve.reach(target) or _last_seconds(curve) > max_seconds):
                return curve
            status = asyncio.run(rl_check_status(started.run_id))
            if status.is_terminal:
                raise RuntimeError(f"hermes-nb run ended early ({status.status}): {status.error}")
    finally:
        asyncio.run(rl_stop_training(started.run_id))


def _last_seconds(curve: Curve) -> float:
    return curve.points[-1][1] if curve.points else 0.0


def hermes_curve(paths: Any, called: float) -> Curve | None:
    """Each evaluation at the time the trainer finished the step it measured (``eval/policy_step``); ``called``:
    when ``rl_start_training`` was called (``time.time()``)."""
    from hermes_nb.protocol.metrics import EVAL_PERCENT_CORRECT, EVAL_POLICY_STEP

    steps = read_rows(paths.metrics)
    if not steps:
        return None
    finished = {row["step"]: row["time"] for row in steps}
    t0 = steps[0]["time"]
    curve = Curve("hermes-nb", load=os.getloadavg()[0], startup=t0 - called)
    for row in read_rows(paths.env_metrics):
        values = row["values"]
        policy_step = int(values.get(EVAL_POLICY_STEP, -1))
        if EVAL_PERCENT_CORRECT in values and policy_step in finished:
            curve.points.append((policy_step, finished[policy_step] - t0, values[EVAL_PERCENT_CORRECT]))
    step_seconds = [r["values"]["train/step_seconds"] for r in steps[1:]]
    curve.seconds_per_step = statistics.median(step_seconds) if step_seconds else 0.0
    return curve


# ---- TRL ----------------------------------------------------------------------------------------------------


def grpo_config(output_dir: str, **fields: Any) -> Any:
    """TRL's ``GRPOConfig`` for a race against hermes-nb (``fields`` on top): the quickstart's shape (group 16, 128
    completions a step), a constant learning rate, Adam's grad-norm clip 1.0, no KL term, group-normalised
    advantages and a token-mean loss (``dapo``), float32 on the CPU, nothing reported or saved."""
    from trl import GRPOConfig

    shared: dict[str, Any] = {
        "per_device_train_batch_size": BATCH_SIZE,
        "num_generations": GROUP_SIZE,
        "lr_scheduler_type": "constant",
        "max_grad_norm": 1.0,
        "beta": 0.0,
        "loss_type": "dapo",
        "scale_rewards": "group",
        "use_cpu": True,
        "bf16": False,
        "gradient_checkpointing": False,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
    }
    return GRPOConfig(output_dir=output_dir, **{**shared, **fields})


def greedy_accuracy(model: Any, tokenizer: Any, items: list[Any]) -> float:
    """The environment's evaluation, in process: greedy, at most MAX_COMPLETION tokens, newline stop."""
    import torch

    was_training = model.training
    model.eval()
    batch = tokenizer([item.prompt for item in items], return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(
            **batch,
            max_new_tokens=MAX_COMPLETION,
            do_sample=False,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    if was_training:
        model.train()
    pairs = zip(texts, items, strict=True)
    right = [is_correct(score_completion(text.split("\n")[0], item.answer)) for text, item in pairs]
    return sum(right) / len(items)


def trl_dataset(seed: int, rows: int) -> Any:
    from datasets import Dataset

    env = task(seed)  # its training items, from its own RNG seeded with the run's seed
    items = [env.train_item() for _ in range(rows)]
    return Dataset.from_dict({"prompt": [i.prompt for i in items], "answer": [i.answer for i in items]})


def reward(prompts: list[str], completions: list[str], answer: list[str], **_: Any) -> list[float | None]:
    return [score_completion(c.split("\n")[0], a) for c, a in zip(completions, answer, strict=True)]


def base_accuracy(seed: int) -> float:
    """The base model's greedy held-out accuracy: the start of both curves."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hermes_nb.system.home import embedded_base_model_dir

    model_dir = str(embedded_base_model_dir())
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return greedy_accuracy(model, AutoTokenizer.from_pretrained(model_dir), task(seed).eval_items())


def run_trl(seed: int, lr: float, eval_every: int, target: float, max_seconds: float, max_steps: int) -> Curve:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from hermes_nb.system.home import embedded_base_model_dir

    model_dir = str(embedded_base_model_dir())
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    items = task(seed).eval_items()
    curve = Curve("TRL GRPOTrainer")

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.t0: float | None = None  # the end of the first step
            self.eval_spent = 0.0
            self.step_ends: list[float] = []

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            now = time.perf_counter()
            self.step_ends.append(now)
            self.t0 = self.t0 if self.t0 is not None else now
            if state.global_step % eval_every:
                return
            began = time.perf_counter()
            accuracy = greedy_accuracy(kwargs["model"], tokenizer, items)
            self.eval_spent += time.perf_counter() - began
            seconds = time.perf_counter() - self.t0 - self.eval_spent
            curve.points.append((state.global_step, seconds, accuracy))
            if accuracy >= target - 1e-9 or seconds > max_seconds:
                control.should_training_stop = True

    clock = Clock()
    with tempfile.TemporaryDirectory() as out:
        called = time.perf_counter()  # what the user's cell does from here on is TRL's start-up
        config = grpo_config(
            out,
            learning_rate=lr,
            temperature=TEMPERATURE,
            max_completion_length=MAX_COMPLETION,
            max_steps=max_steps,
            use_vllm=False,
            logging_steps=max_steps,
            dataloader_num_workers=0,
            seed=seed,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=config,
            train_dataset=trl_dataset(seed, max_steps * BATCH_SIZE // GROUP_SIZE),
            processing_class=tokenizer,
            callbacks=[clock],
        )
        trainer.train()
    gaps = [b - a for a, b in itertools.pairwise(clock.step_ends)]
    # A gap after an evaluation step includes the evaluation; leave those out of the per-step time.
    steps = [g for i, g in enumerate(gaps, start=2) if (i - 1) % eval_every]
    curve.seconds_per_step = statistics.median(steps) if steps else 0.0
    curve.load = os.getloadavg()[0]
    curve.startup = (clock.t0 or called) - called
    return curve


# ---- report -------------------------------------------------------------------------------------------------


def describe(curve: Curve, target: float) -> list[str]:
    points = ", ".join(f"{acc * 100:.1f}% (step {st}, {s:.1f} s)" for st, s, acc in curve.points)
    hit = curve.reach(target)
    reached = f"step {hit[0]}, {hit[1]:.1f} s" if hit else "not reached"
    return [
        f"  {curve.name}: median {curve.seconds_per_step:.3f} s/step, load avg {curve.load:.1f}; "
        f"start-up {curve.startup:.1f} s; target {target * 100:.1f}%: {reached}",
        f"    evals: {points}",
    ]


def ratio(ours: Curve, trl: Curve, target: float) -> float | None:
    a, b = ours.reach(target), trl.reach(target)
    return a[1] / b[1] if a is not None and b is not None else None


def ratio_from_call(ours: Curve, trl: Curve, target: float) -> float | None:
    a, b = ours.reach_from_call(target), trl.reach_from_call(target)
    return a / b if a is not None and b is not None else None


def shown(value: float | None) -> str:
    return "n/a (a side did not reach the target)" if value is None else f"{value:.2f}"


@dataclass
class SeedResult:
    lines: list[str]
    after_startup: float | None
    cold_first: float | None = None  # from the call; with --from-call only
    warm_first: float | None = None
    warm: float | None = None


def cold_first_run(seed: int, lr: float, args: argparse.Namespace, target: float) -> Curve:
    """The first run of a kernel with warm starts off, in a fresh home."""
    from hermes_nb.runs.supervision import warm_start

    warm_start.discard()
    os.environ[warm_start.WARM_START_VAR] = "0"
    try:
        return run_hermes(seed, lr, args.eval_every, target, args.max_seconds)
    finally:
        del os.environ[warm_start.WARM_START_VAR]


def warm_first_run(seed: int, lr: float, args: argparse.Namespace, target: float) -> Curve:
    """The first run of a kernel with warm starts on, in a fresh home: selected, ``--pause`` seconds, started."""
    from hermes_nb.api import rl_select_environment
    from hermes_nb.runs.supervision import warm_start

    warm_start.discard()  # no kit of an earlier home serves it
    asyncio.run(rl_select_environment("arithmetic"))
    time.sleep(args.pause)
    curve = run_hermes(seed, lr, args.eval_every, target, args.max_seconds)
    curve.name = f"hermes-nb (warm first start, {args.pause:g} s after the selection)"
    return curve


def warm_next_run(seed: int, lr: float, args: argparse.Namespace, target: float) -> Curve:
    """The next run of the kernel, once the kit the previous start left is ready."""
    from hermes_nb.runs.supervision import warm_start

    if not warm_start.wait_until_ready(120.0):
        raise RuntimeError("the warm kit the previous run left was not ready within 120 s (logs/warm_kit.log)")
    curve = run_hermes(seed, lr, args.eval_every, target, args.max_seconds)
    curve.name = "hermes-nb (warm start, the kit the previous run left)"
    return curve


def warm_runs(seed: int, lr: float, args: argparse.Namespace, target: float) -> tuple[Curve, Curve]:
    """A kernel's first run, warm after its selection, then its next."""
    return warm_first_run(seed, lr, args, target), warm_next_run(seed, lr, args, target)


def in_fresh_home(run: Callable[..., T], *arguments: Any) -> T:
    from hermes_nb.runs.supervision import warm_start

    with tempfile.TemporaryDirectory() as home:
        os.environ["HERMES_NB_HOME"] = home
        try:
            return run(*arguments)
        finally:
            warm_start.discard()  # TRL runs on a quiet machine, as hermes-nb did


def one_seed(seed: int, lr: float, args: argparse.Namespace) -> SeedResult:
    start = base_accuracy(seed)
    target = start + args.lift / 100
    ours = in_fresh_home(cold_first_run, seed, lr, args, target)
    warm_first = warm = None
    if args.from_call:
        warm_first, warm = in_fresh_home(warm_runs, seed, lr, args, target)
    trl = run_trl(seed, lr, args.eval_every, target, args.max_seconds, max_steps=2000)
    result = SeedResult([], ratio(ours, trl, target))
    speed = trl.seconds_per_step / ours.seconds_per_step if ours.seconds_per_step else float("nan")
    result.lines = [
        f"seed {seed}: base model {start * 100:.1f}%, target {target * 100:.1f}%",
        *describe(ours, target),
        *(line for curve in (warm_first, warm) if curve is not None for line in describe(curve, target)),
        *describe(trl, target),
        f"  time ratio hermes-nb/TRL: {shown(result.after_startup)}; per step hermes-nb is {speed:.2f}x TRL's speed",
    ]
    if warm_first is not None and warm is not None:
        result.cold_first = ratio_from_call(ours, trl, target)
        result.warm_first, result.warm = ratio_from_call(warm_first, trl, target), ratio_from_call(warm, trl, target)
        result.lines.append(
            f"  from the call: cold first {shown(result.cold_first)}, warm first {shown(result.warm_first)}, "
            f"warm next {shown(result.warm)}"
        )
    return result


def summary(name: str, ratios: list[float | None]) -> str:
    reached = [r for r in ratios if r is not None]
    if not reached:
        return f"{name}: none reached"
    spread = f"{min(reached):.2f}-{max(reached):.2f}"
    listed = ", ".join(f"{r:.2f}" for r in reached)
    middle = statistics.median(reached)
    return f"{name} over {len(reached)} of {len(ratios)} seeds: {listed}; median {middle:.2f} ({spread})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--lift", type=float, default=15.0, help="target = start accuracy + this many points")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--max-seconds", type=float, default=240.0, help="give up on a side after this long")
    parser.add_argument("--learning-rate", type=float, default=None, help="default: the quickstart config's")
    parser.add_argument("--from-call", action="store_true", help="also time from the user's call, cold and warm")
    parser.add_argument("--pause", type=float, default=10.0, help="seconds from the selection to a warm first start")
    parser.add_argument("--write", action="store_true", help="append the numbers to docs/benchmarks.md")
    args = parser.parse_args()
    lr = args.learning_rate or quickstart_learning_rate()
    os.environ.setdefault("WANDB_MODE", "offline")
    lines = [
        f"2-digit addition, group {GROUP_SIZE}, {BATCH_SIZE} completions/step, lr {lr:g}, "
        f"eval every {args.eval_every} steps, target +{args.lift:g} points"
    ]
    print(lines[0], flush=True)
    results: list[SeedResult] = []
    for seed in args.seeds:
        results.append(one_seed(seed, lr, args))
        print("\n".join(results[-1].lines), flush=True)
        lines += results[-1].lines
    totals = [summary("time ratio hermes-nb/TRL (target <= 0.5)", [r.after_startup for r in results])]
    if args.from_call:
        totals.append(summary("from the call, first run, cold", [r.cold_first for r in results]))
        totals.append(summary(f"from the call, first run, warm ({args.pause:g} s)", [r.warm_first for r in results]))
        totals.append(summary("from the call, next run, warm", [r.warm for r in results]))
    print("\n".join(totals))
    lines += totals
    if args.write:
        write_docs(lines, ".venv/bin/python bench/vs_trl.py " + " ".join(sys.argv[1:]))


def write_docs(lines: list[str], command: str) -> None:
    import trl
    from report import append_run, run_block

    intro = (__doc__ or "").split("\n\n", 1)[1].rsplit("\n\n", 1)[0] + "\n"
    append_run("## Against TRL", intro, run_block(f"TRL {trl.__version__}, `{command}`", lines))


if __name__ == "__main__":
    main()
