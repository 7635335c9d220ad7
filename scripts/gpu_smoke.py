"""A short real run on CUDA: ``rl_start_training`` with ``trainer.device: cuda``, asserted to complete.

    .venv/bin/python scripts/gpu_smoke.py [--steps 4] [--dtype auto] [--lora-rank 0] [--gradient-checkpointing]
        [--sampler auto|native|vllm] [--vllm-gpu-memory-utilization 0.4] [--vllm-sleep-mode]

(``--sampler vllm`` needs ``HERMES_NB_VLLM_PYTHON``: docs/gpu.md.)

Trains the agent task (``calculator_agent`` on the embedded chat model, ``configs/agent.yaml``) when both are
shipped, else ``arithmetic`` on the embedded base model, in a temporary ``HERMES_NB_HOME``. Checks that the run
completes, that the trainer says it ran on CUDA in the expected dtype, that every logged loss is finite and that
the final checkpoint is a float32 ``from_pretrained`` directory; prints the median step time. Exit 0 when all
hold, 1 when one does not, 2 when torch sees no CUDA device (nothing is started then).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
AGENT_CONFIG = REPO_ROOT / "configs" / "agent.yaml"
AGENT_ENVIRONMENT = "calculator_agent"
FALLBACK_ENVIRONMENT = "arithmetic"
NO_CUDA_EXIT = 2
POLL_S = 1.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="trainer steps (default 4)")
    parser.add_argument("--device", default="cuda", help="trainer.device (default cuda)")
    parser.add_argument("--dtype", default="auto", help="trainer.dtype (default auto: bfloat16 on CUDA)")
    parser.add_argument("--lora-rank", type=int, default=0, help="trainer.lora_rank (default 0: full fine-tune)")
    parser.add_argument("--gradient-checkpointing", action="store_true", help="trainer.gradient_checkpointing")
    parser.add_argument("--sampler", default="auto", help="trainer.sampler: auto, native or vllm (default auto)")
    parser.add_argument("--vllm-gpu-memory-utilization", type=float, default=None, help="vLLM's share of the GPU")
    parser.add_argument("--vllm-sleep-mode", action="store_true", help="trainer.vllm_sleep_mode")
    parser.add_argument("--timeout", type=float, default=480.0, help="seconds the run may take (default 480)")
    return parser.parse_args(argv)


def cuda_problem(device: str) -> str | None:
    """Why this machine cannot run the smoke test on ``device`` (``--device cpu`` checks the script itself)."""
    import torch

    if not device.startswith("cuda") or torch.cuda.is_available():
        return None
    return f"gpu_smoke: torch {torch.__version__} sees no CUDA device; nothing to check here (run it on a GPU)"


def pick_task() -> tuple[str, Path | None]:
    """The agent environment on the chat model when both are shipped, else arithmetic on the base model."""
    from hermes_nb.api import rl_list_environments
    from hermes_nb.system.home import embedded_chat_model_dir

    listed = {env.name for env in asyncio.run(rl_list_environments()).environments}
    chat_model = (embedded_chat_model_dir() / "model.safetensors").is_file()
    if AGENT_ENVIRONMENT in listed and AGENT_CONFIG.is_file() and chat_model:
        return AGENT_ENVIRONMENT, AGENT_CONFIG
    return FALLBACK_ENVIRONMENT, None


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "env.total_steps": args.steps,
        "env.steps_per_eval": 0,  # the smoke test is about training on the device; evaluation adds only time
        "trainer.device": args.device,
        "trainer.dtype": args.dtype,
        "trainer.lora_rank": args.lora_rank,
        "trainer.gradient_checkpointing": args.gradient_checkpointing,
        "trainer.save_checkpoint_interval": 0,
        "trainer.sampler": args.sampler,
        "trainer.vllm_sleep_mode": args.vllm_sleep_mode,
        "wandb.mode": "disabled",
    } | (
        {}
        if args.vllm_gpu_memory_utilization is None
        else {"trainer.vllm_gpu_memory_utilization": args.vllm_gpu_memory_utilization}
    )


def wait_until_ended(run_id: str, timeout: float) -> Any:
    from hermes_nb.api import rl_check_status

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = asyncio.run(rl_check_status(run_id))
        if status.is_terminal:
            return status
        time.sleep(POLL_S)
    raise TimeoutError(f"run {run_id} did not end within {timeout:.0f} s")


def problems(run_id: str, status: Any, args: argparse.Namespace) -> list[str]:
    """What is wrong with the ended run: its status, its device, its losses, its checkpoint."""
    from hermes_nb.config import RunConfig
    from hermes_nb.metrics.reader import read_metrics_file
    from hermes_nb.protocol.metrics import TRAIN_LOSS
    from hermes_nb.protocol.run_files import CONFIG_FILE
    from hermes_nb.system.home import run_paths

    paths = run_paths(run_id)
    found = []
    if status.status != "completed":
        found.append(f"run ended {status.status}: {status.error}\n" + "\n".join(status.log_tail))
    log = paths.logs["trainer"].read_text(encoding="utf-8", errors="replace").splitlines()
    said = [line.partition("local backend on ")[2] for line in log if "local backend on " in line]
    print(f"trainer: {said[0] if said else 'no device line in ' + str(paths.logs['trainer'])}")
    if not said or not said[0].replace("cuda:0", "cuda").startswith(args.device.replace("cuda:0", "cuda")):
        found.append(f"the trainer did not run on {args.device} ({paths.logs['trainer']})")
    sampler = RunConfig.load(paths.run_dir / CONFIG_FILE).infra.sampler
    print(f"sampler: {sampler}")
    if args.sampler != "auto" and sampler != args.sampler:
        found.append(f"the run sampled with {sampler}, not {args.sampler}")
    rows = read_metrics_file(paths.metrics).rows
    losses = [row.values[TRAIN_LOSS] for row in rows if TRAIN_LOSS in row.values]
    if len(rows) < args.steps or not all(math.isfinite(loss) for loss in losses):
        found.append(f"{len(rows)} metrics rows of {args.steps} steps; losses {losses}")
    checkpoints = sorted(paths.checkpoints_dir.glob("step_*"), key=lambda p: int(p.name.split("_")[1]))
    saved = json.loads((checkpoints[-1] / "config.json").read_text()) if checkpoints else {}
    if saved.get("dtype", saved.get("torch_dtype")) != "float32":
        found.append(f"final checkpoint {checkpoints[-1:]} is not a float32 model: {saved.get('dtype')}")
    return found


def report(run_id: str) -> None:
    from hermes_nb.metrics.reader import read_metrics_file
    from hermes_nb.protocol.metrics import TRAIN_LOSS, TRAIN_STEP_SECONDS
    from hermes_nb.system.home import run_paths

    rows = read_metrics_file(run_paths(run_id).metrics).rows
    # The first step includes warm-up (CUDA context, kernels' first launch): the median of the others.
    seconds = [row.values[TRAIN_STEP_SECONDS] for row in rows[1:] if TRAIN_STEP_SECONDS in row.values]
    median = statistics.median(seconds) if seconds else float("nan")
    losses = ", ".join(f"{row.values.get(TRAIN_LOSS, float('nan')):.4g}" for row in rows)
    print(f"steps {len(rows)}; median step time {median:.3f} s (after the first); losses {losses}")


def smoke(args: argparse.Namespace) -> int:
    from hermes_nb.api import rl_load_config, rl_select_environment, rl_start_training, rl_stop_training

    environment, config = pick_task()
    print(f"gpu_smoke: {environment}, {args.steps} steps on {args.device} (dtype {args.dtype})", flush=True)
    asyncio.run(rl_select_environment(environment))
    if config is not None:
        asyncio.run(rl_load_config(config))
    started = asyncio.run(rl_start_training(**overrides(args)))
    try:
        status = wait_until_ended(started.run_id, args.timeout)
    finally:
        asyncio.run(rl_stop_training(started.run_id))
    found = problems(started.run_id, status, args)
    report(started.run_id)
    for problem in found:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    problem = cuda_problem(args.device)
    if problem is not None:
        print(problem, file=sys.stderr)
        return NO_CUDA_EXIT
    with tempfile.TemporaryDirectory(prefix="hermes-gpu-smoke-") as home_dir:
        os.environ["HERMES_NB_HOME"] = home_dir  # before hermes_nb reads it
        code = smoke(args)
    print("gpu_smoke: passed" if code == 0 else "gpu_smoke: failed")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
