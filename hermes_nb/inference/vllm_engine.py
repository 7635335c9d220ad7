"""The inference engine of ``trainer.sampler: vllm``: the run's own server and batcher, generating with vLLM.

It is ``InferenceEngine`` with the two things an engine does replaced: what generates a batch (vLLM's ``LLM``, in
this process: the trainer runs under the vLLM venv's Python, ``hermes_nb.runs.sampler_choice``) and how published
weights get in (``collective_rpc("reload_weights", ...)`` from the trainer's own state dict, no file round-trip).
Everything else is the parent's: requests merged into one batch, one sampler thread that alone touches the engine,
weights applied *between* batches so a generation never sees half an update, the ``policy_version`` each batch was
sampled with. A LoRA run publishes merged weights (``LocalBackend.save_weights_for_sampler`` merges them anyway, and
a full reload of a small model's tensors costs less than vLLM's adapter path, which needs ``enable_lora`` and a rank
cap fixed at start).

Logprobs: vLLM is started with ``logprobs_mode="processed_logprobs"``, so the logprob of each sampled token is taken
after temperature and top-p, i.e. under the distribution it was drawn from (the ``q`` of the importance ratio), as
the native sampler reports it; greedy rows report 0.0 (a point mass), as there. Prefix caching is on (a group's
prompt is computed once for its ``n`` rows) and is reset after every weight load: cached keys and values of the old
weights must not serve the new ones.

Memory on one GPU: vLLM takes ``trainer.vllm_gpu_memory_utilization`` of the device (weights, activations, KV
cache), the trainer the rest. With ``trainer.vllm_sleep_mode`` the trainer puts vLLM to sleep (level 1: weights to
CPU memory, KV cache freed) once it holds a batch and wakes it when it publishes the step's weights, so a step
computes with vLLM's share free; batches wait while it sleeps. Level 2 (weights discarded) would spare the CPU copy,
since every wake-up reloads the weights anyway, but any parameter the trainer's state dict does not name would wake
as garbage; level 1 stays until a GPU run shows level 2 safe. Sleep, wake-up and generation take one lock, so none
overlaps another.
"""

from __future__ import annotations

import dataclasses
import os
import random
import threading
from pathlib import Path
from typing import Any

import torch

from hermes_nb.inference.contract import Policy
from hermes_nb.inference.engine import InferenceEngine
from hermes_nb.inference.sampler import RowResult, SampleRow
from hermes_nb.protocol.inference import FinishReason
from hermes_nb.system.devices import resolve_hardware

# vLLM's KV cache on a CPU (its CPU build reserves a fixed size instead of a fraction of free memory), unless
# vLLM's own VLLM_CPU_KVCACHE_SPACE (GiB) is set: 1 GiB holds a 128-row wave of a ~120M model's rows.
CPU_KV_CACHE_BYTES = 2**30
_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """What the server reads of a policy's model (``config.max_position_embeddings``): the torch copy itself is
    released once vLLM holds its weights."""

    config: Any


class VLLMEngine(InferenceEngine):
    """Holds the live policy in a vLLM engine; ``await engine.sample(rows)`` from the server's event loop."""

    def __init__(
        self,
        model_dir: Path,
        *,
        gpu_memory_utilization: float,
        sleep_mode: bool = False,
        device: str = "auto",
        dtype: str = "auto",
        seed: int = 0,
    ) -> None:
        super().__init__(seed=seed)
        self._model_dir = model_dir
        self._hardware = resolve_hardware(device, dtype)
        self._gpu_memory_utilization = gpu_memory_utilization
        self._sleep_mode = sleep_mode
        self._llm: Any = None
        # Generation waits on it while vLLM sleeps; close() wakes the waiter so the sampler thread can end.
        self._awake = threading.Condition(self._generator_lock)
        self._asleep = False
        self._closed = False
        self.weight_loads = 0

    def publish(self, policy: Policy) -> None:
        """Start vLLM on the base model's directory (once), then serve ``policy``'s weights from the next batch."""
        if self._llm is None:
            self._llm = self._start()
        weights = dict(policy.model.state_dict())
        super().publish(dataclasses.replace(policy, model=ModelInfo(config=policy.model.config)))
        self.publish_weights(weights, policy.version)

    def _start(self) -> Any:
        # In-process engine: the sampler thread drives it, weights go in as tensors, and a kill of this process
        # leaves no engine process behind.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        on_cpu = self._hardware.device.type == "cpu"
        memory: dict[str, Any] = {
            "gpu_memory_utilization": self._gpu_memory_utilization,
            "enable_sleep_mode": self._sleep_mode,
        }
        if on_cpu:
            memory = {} if os.environ.get("VLLM_CPU_KVCACHE_SPACE") else {"kv_cache_memory_bytes": CPU_KV_CACHE_BYTES}
        # LLM(seed=...) seeds the process's Python and torch generators, which here are the trainer's (restored
        # from a checkpoint on resume): they are put back as they were.
        python_state = random.getstate()
        cuda = [torch.cuda.current_device()] if self._hardware.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            llm = self._llm_for(on_cpu, memory)
        random.setstate(python_state)
        return llm

    def _llm_for(self, on_cpu: bool, memory: dict[str, Any]) -> Any:
        from vllm import LLM

        return LLM(
            model=str(self._model_dir),
            dtype=_DTYPES[self._hardware.dtype],
            seed=self._seed,
            logprobs_mode="processed_logprobs",
            enable_prefix_caching=True,
            # The model's generation_config.json must not change the sampling a request asks for.
            generation_config="vllm",
            # CUDA graphs on a GPU; on the CPU there is nothing to capture.
            enforce_eager=on_cpu,
            **memory,
        )

    def sleep(self) -> None:
        """Free vLLM's GPU memory for a training step (``sleep_mode`` only; after the running batch, if any)."""
        if not self._sleep_mode or self._llm is None:
            return
        with self._awake:
            if not self._asleep and not self._closed:
                self._llm.sleep(level=1)
                self._asleep = True

    def publish_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """The parent's, and a sleeping vLLM woken: the next batch loads ``weights`` into it and samples."""
        super().publish_weights(weights, version)
        with self._awake:
            if self._asleep:
                self._llm.wake_up()
                self._asleep = False
                self._awake.notify_all()

    def _load_weights(self, policy: Policy, weights: dict[str, torch.Tensor]) -> None:
        self._llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights.items())})
        self._llm.reset_prefix_cache()
        self.weight_loads += 1

    def _generate(self, rows: list[SampleRow]) -> tuple[list[RowResult], int]:
        from vllm import TokensPrompt

        with self._awake:
            self._awake.wait_for(lambda: not self._asleep or self._closed)
            if self._closed:
                raise RuntimeError("the vLLM engine is closed")
            policy = self._current_policy()
            prompts = [TokensPrompt(prompt_token_ids=list(row.prompt)) for row in rows]
            outputs = self._llm.generate(prompts, [self._params(row) for row in rows], use_tqdm=False)
            return [_result(row, output.outputs[0]) for row, output in zip(rows, outputs, strict=True)], policy.version

    def _params(self, row: SampleRow) -> Any:
        from vllm import SamplingParams

        return SamplingParams(
            max_tokens=row.max_tokens,
            temperature=row.temperature,
            top_p=row.top_p,
            # vLLM's CPU build cannot seed a request ("CPU Generator does not use offset"): there a seeded row is
            # drawn from the engine's seeded stream, like any other.
            seed=row.seed if self._hardware.device.type != "cpu" else None,
            # The server's stop set already holds the model's EOS (Policy.eos_ids): only that set ends a row.
            ignore_eos=True,
            stop_token_ids=sorted(row.stop_token_ids),
            stop=list(row.stop_strings) or None,
            include_stop_str_in_output=True,
            logprobs=0,
        )

    def close(self) -> None:
        # Not under the lock, which a running batch holds: only a sampler thread waiting on a sleeping vLLM (which
        # holds no lock while it waits) needs waking.
        self._closed = True
        if self._asleep:
            with self._awake:
                self._awake.notify_all()
        super().close()
        self._llm = None


def _result(row: SampleRow, completion: Any) -> RowResult:
    tokens = [int(t) for t in completion.token_ids]
    if row.temperature == 0:
        logprobs = [0.0] * len(tokens)
    else:
        logprobs = [float(step[token].logprob) for step, token in zip(completion.logprobs, tokens, strict=True)]
    finish: FinishReason = "stop" if completion.finish_reason == "stop" else "length"
    return RowResult(token_ids=tokens, logprobs=logprobs, finish_reason=finish)
