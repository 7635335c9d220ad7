"""The pre-run estimate: what a config's run will hold in memory, how long it will take, what it will sample and
train, and (Tinker) what it will cost, from the config and this machine alone, before anything starts.

Memory comes from ``trainer/local/memory_model.py`` against what the device has free now (psutil's available memory on
the CPU; ``torch.cuda.mem_get_info`` on CUDA). Time comes from earlier runs of the same model and sizes in this
home (the median ``train/step_seconds`` of their ``metrics.jsonl``), else from a stated per-step cost
(``STATED_*`` below); the result says which. A price comes only from the user's price table (``prices.py``,
``<hermes home>/prices.yaml``): hermes-nb ships no prices, so without one the result says "no price known".

``check_fits`` is the launcher's one call: a local run whose estimate exceeds the free memory is refused, naming
the fields that shrink it, unless ``trainer.ignore_memory_estimate`` is true.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from hermes_nb.config import RunConfig, base_model_dir
from hermes_nb.errors import ConfigError
from hermes_nb.metrics.reader import read_all_metrics
from hermes_nb.protocol.health import CostFigures, ProcessCost, format_usd
from hermes_nb.protocol.metrics import TRAIN_STEP_SECONDS
from hermes_nb.protocol.run_files import TRAINER_METRICS_FILE
from hermes_nb.results import Result, format_duration, html_table
from hermes_nb.runs import prices
from hermes_nb.system import home
from hermes_nb.trainer.local.memory_model import Device, MemoryEstimate, estimate_run

# The fallback when no earlier run matches, fitted to the quickstart on 2 CPU cores (0.9M parameters, 128 sequences
# of at most 64 tokens): a 40-step run measured 0.051 s a step on a quiet machine and 0.128 under a load of 7, and a
# long run 0.127 (docs/benchmarks.md), so 0.08 stands within 2x of all three. Half of it a fixed cost (HTTP,
# batching, the optimizer step), half compute in proportion to parameters x tokens at max_token_length (the config
# gives no shorter length). One machine's one point, and said to be: a larger model is better estimated from an
# earlier run of its own. A GPU's compute is taken as 20x two CPU cores'.
STATED_STEP_OVERHEAD_SECONDS = 0.04
STATED_SECONDS_PER_PARAMETER_TOKEN = 5.7e-12
STATED_CUDA_SPEEDUP = 20.0
# Said beside a time from the stated cost: it knows parameters and tokens, not turns, tools or completion lengths.
STATED_COST_CAVEAT = (
    "no earlier run of this environment, model and sizes here: the stated cost is fitted to the quickstart's "
    "single-turn arithmetic (a multi-turn agent step measured 14x it); this run's steps calibrate the next estimate"
)
# Earlier runs read for step times: enough to find a match, few enough to stay fast in a crowded home.
EARLIER_RUNS_READ = 50
GIB = 1 << 30

TimeSource = Literal["earlier runs", "stated per-step cost", "no earlier run"]


class ProcessMemory(BaseModel):
    model_config = ConfigDict(frozen=True)

    process: str
    bytes: int
    parts: dict[str, int]


class RunEstimate(Result):
    """``rl_estimate_run``'s answer: memory per process against what is free, time, tokens and price."""

    base_model: str
    backend: str
    device: str
    processes: list[ProcessMemory]
    memory_bytes: int  # what the trainer process holds at its peak, its in-process sampler included
    free_bytes: int | None  # None: not measured (a Tinker run's memory is the server's)
    fits: bool
    to_change: list[str]  # the fields that shrink the estimate, when it does not fit
    seconds_per_step: float | None  # None: not known (a Tinker run with no earlier run to go by)
    total_seconds: float | None
    time_source: TimeSource
    total_steps: int
    tokens_sampled: int  # at most: every sequence of every step at max_token_length
    tokens_trained: int
    price_usd: float | None
    price_source: str

    def _text_lines(self) -> list[str]:
        lines = [f"{self.base_model} on {self.device} ({self.backend})"]
        for process in self.processes:
            lines.append(f"  {process.process}: {_gib(process.bytes)}")
        free = "not measured" if self.free_bytes is None else f"{_gib(self.free_bytes)} free"
        lines.append(f"  memory: {_gib(self.memory_bytes)} of {free}: {'fits' if self.fits else 'DOES NOT FIT'}")
        if not self.fits:
            lines.append(f"  to make it fit, change: {', '.join(self.to_change)}")
        per_step = "–" if self.seconds_per_step is None else f"{self.seconds_per_step:.3g}"
        lines.append(
            f"  time: {per_step} s/step, {format_duration(self.total_seconds)} for {self.total_steps} steps "
            f"(from {self.time_source})"
        )
        if self.time_source == "stated per-step cost":
            lines.append(f"    {STATED_COST_CAVEAT}")
        lines.append(f"  tokens: at most {self.tokens_sampled:,} sampled, {self.tokens_trained:,} trained")
        price = "no price known" if self.price_usd is None else format_usd(self.price_usd)
        if self.backend == "local":
            price = "none"
        lines.append(f"  price: {price} ({self.price_source})")
        return lines

    def _html_body(self) -> str:
        rows = [[p.process, _gib(p.bytes)] for p in self.processes]
        rows.append(["free", "not measured" if self.free_bytes is None else _gib(self.free_bytes)])
        summary = "<br>".join(self._text_lines()[-3:])
        return html_table(["process", "memory"], rows) + f"<p>{summary}</p>"


def _gib(size: int) -> str:
    return f"{size / GIB:.2f} GiB"


def estimate_config(config: RunConfig) -> RunEstimate:
    """The estimate of ``config``'s run on this machine (see the module doc)."""
    if config.trainer.backend != "local":
        return _remote_estimate(config)
    device, memory, free = local_memory(config)
    fits = memory.total <= free
    seconds, source = step_seconds(config, device, memory.parameters)
    steps = int(config.env_value("total_steps"))
    return RunEstimate(
        base_model=config.trainer.base_model,
        backend=config.trainer.backend,
        device=device,
        processes=process_memory(memory),
        memory_bytes=memory.total,
        free_bytes=free,
        fits=fits,
        to_change=[] if fits else fields_to_change(config),
        seconds_per_step=seconds,
        total_seconds=None if seconds is None else seconds * steps,
        time_source=source,
        total_steps=steps,
        tokens_sampled=run_tokens(config),
        tokens_trained=run_tokens(config),
        price_usd=None,
        price_source=prices.no_price(config),
    )


def check_sizes_known(config: RunConfig) -> None:
    """A local base model is sized from its ``config.json``: refused, naming the field, where there is none."""
    if (base_model_dir(config.trainer.base_model) / "config.json").is_file():
        return
    raise ConfigError(
        f"trainer.base_model: {config.trainer.base_model} has no config.json on this machine to size it from; "
        "a start downloads a hub model, after which it can be estimated"
    )


def run_tokens(config: RunConfig) -> int:
    """Tokens sampled (and trained) at most: every sequence of every step at ``max_token_length``."""
    sizes = ("total_steps", "batch_size", "max_token_length")
    steps, batch, length = (int(config.env_value(name)) for name in sizes)
    return steps * batch * length


def _remote_estimate(config: RunConfig) -> RunEstimate:
    """A Tinker run: its memory is the server's; time from earlier runs only; a price from the user's table."""
    measured = earlier_step_seconds(config)
    seconds = statistics.median(measured) if measured else None
    steps = int(config.env_value("total_steps"))
    tokens = run_tokens(config)
    price = prices.run_price(config)
    price_usd = None if price is None else price.dollars(sampled=tokens, trained=tokens)
    price_source = prices.no_price(config) if price is None else price.described()
    return RunEstimate(
        base_model=config.trainer.base_model,
        backend=config.trainer.backend,
        device="tinker server",
        processes=[],
        memory_bytes=0,
        free_bytes=None,
        fits=True,
        to_change=[],
        seconds_per_step=seconds,
        total_seconds=None if seconds is None else seconds * steps,
        time_source="earlier runs" if measured else "no earlier run",
        total_steps=steps,
        tokens_sampled=run_tokens(config),
        tokens_trained=run_tokens(config),
        price_usd=price_usd,
        price_source=price_source,
    )


def process_memory(memory: MemoryEstimate) -> list[ProcessMemory]:
    """The trainer's peak and the sampler's share, each with its parts."""
    trainer_parts = ("weights", "gradients", "optimizer", "activations", "logits", "embedding_gradients")
    dumped = memory.model_dump()
    return [
        ProcessMemory(
            process="trainer", bytes=memory.trainer_peak, parts={name: dumped[name] for name in trainer_parts}
        ),
        ProcessMemory(
            process="sampler",
            bytes=memory.sampler_weights + memory.kv_cache,
            parts={"weights": memory.sampler_weights, "kv_cache": memory.kv_cache},
        ),
    ]


def run_device(setting: str) -> Device:
    """``trainer.device`` as the memory model takes it; ``auto`` asks torch only where a GPU driver is present,
    so a CPU machine's start never imports torch for it."""
    if setting.startswith("cuda"):
        return "cuda"
    if setting != "auto" or not Path("/dev/nvidiactl").exists():
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def device_memory(device: Device) -> tuple[int, int]:
    """Bytes free on ``device`` now, and its total (vLLM's share is of the total)."""
    if device == "cuda":
        import torch

        free, total = torch.cuda.mem_get_info()
        return int(free), int(total)
    import psutil

    memory = psutil.virtual_memory()
    return int(memory.available), int(memory.total)


def fields_to_change(config: RunConfig) -> list[str]:
    """The fields that shrink a local run's memory, those still at their larger setting first."""
    trainer = config.trainer
    fields = ["env.group_size / env.batch_size", "env.max_token_length"]
    if not trainer.lora_rank:
        fields.append("trainer.lora_rank")
    if not trainer.gradient_checkpointing:
        fields.append("trainer.gradient_checkpointing")
    if trainer.sampler != "native":
        fields.append("trainer.vllm_gpu_memory_utilization")
    return fields


def local_memory(config: RunConfig) -> tuple[Device, MemoryEstimate, int]:
    """A local run's device, its memory estimate there, and the bytes free on it now."""
    device = run_device(config.trainer.device)
    free, total = device_memory(device)
    check_sizes_known(config)
    return device, estimate_run(config, device, gpu_bytes=total if device == "cuda" else 0), free


def check_fits(config: RunConfig) -> None:
    """Refuse a local run whose estimate exceeds the free memory (``ConfigError`` naming the fields to change).
    Memory only: a start reads no earlier runs for their step times."""
    if config.trainer.backend != "local" or config.trainer.ignore_memory_estimate:
        return
    device, memory, free = local_memory(config)
    if memory.total <= free:
        return
    raise ConfigError(
        f"this run needs about {_gib(memory.total)} on {device} and {_gib(free)} is free: change "
        f"{', '.join(fields_to_change(config))}, or set trainer.ignore_memory_estimate=true to start it anyway"
    )


def step_seconds(config: RunConfig, device: Device, parameters: int) -> tuple[float, TimeSource]:
    """Seconds per step: the median of earlier runs of the same model and sizes, else the stated cost."""
    measured = earlier_step_seconds(config)
    if measured:
        return statistics.median(measured), "earlier runs"
    tokens = int(config.env_value("batch_size")) * int(config.env_value("max_token_length"))
    compute = STATED_SECONDS_PER_PARAMETER_TOKEN * parameters * tokens
    if device == "cuda":
        compute /= STATED_CUDA_SPEEDUP
    return STATED_STEP_OVERHEAD_SECONDS + compute, "stated per-step cost"


def _sizes_key(config: RunConfig) -> tuple[object, ...]:
    trainer = config.trainer
    # The environment too: at the same sizes a multi-turn agent's step (sequential turns, tool waits) is ten times
    # a single-turn task's (docs/benchmarks.md, the estimate against calculator_agent).
    environment = config.environment.name if config.environment is not None else None
    env = tuple(int(config.env_value(name)) for name in ("batch_size", "group_size", "max_token_length"))
    return (environment, trainer.backend, trainer.base_model, trainer.lora_rank, trainer.device, *env)


def earlier_step_seconds(config: RunConfig) -> list[float]:
    """Step times of earlier runs in this home with the same backend, model, LoRA rank, device and sizes."""
    runs = home.runs_dir()
    if not runs.is_dir():
        return []
    key = _sizes_key(config)
    seconds: list[float] = []
    # A started run's own estimate (recorded beside its actual figures) reads only the runs begun before it: run ids
    # sort by their creation time.
    own = config.infra.run_id
    candidates = [d for d in runs.iterdir() if own is None or d.name < own]
    for run_dir in sorted(candidates, reverse=True)[:EARLIER_RUNS_READ]:
        earlier = _run_config(run_dir)
        if earlier is not None and _sizes_key(earlier) == key:
            seconds += _step_seconds_of(run_dir)
    return seconds


def _run_config(run_dir: Path) -> RunConfig | None:
    path = run_dir / "config.yaml"
    try:
        return RunConfig.from_yaml_text(path.read_text(encoding="utf-8"), str(path))
    except (OSError, ValueError, ConfigError):
        return None  # a run being laid out, or one from an older release: not comparable


def _step_seconds_of(run_dir: Path) -> list[float]:
    rows = read_all_metrics(run_dir / TRAINER_METRICS_FILE) if (run_dir / TRAINER_METRICS_FILE).exists() else []
    return [row.values[TRAIN_STEP_SECONDS] for row in rows if TRAIN_STEP_SECONDS in row.values]


def estimated_cost(estimate: RunEstimate) -> CostFigures:
    """The estimate in the shape of a run's actual figures (``cost.json``), so that its error is the difference of
    the two. What the estimate does not model is left out: CPU-seconds (each process's figure is its memory), and
    the start phase's seconds."""
    return CostFigures(
        wall_seconds={} if estimate.total_seconds is None else {"train": estimate.total_seconds},
        processes={p.process: ProcessCost(peak_rss_bytes=p.bytes) for p in estimate.processes},
        tokens_sampled=estimate.tokens_sampled,
        tokens_trained=estimate.tokens_trained,
        price_usd=estimate.price_usd,
    )
