"""The ``local`` backend: torch on this machine, any Hugging Face causal LM from a local directory.

Full fine-tune by default; LoRA through ``peft`` when ``lora_rank > 0`` (checkpoints then hold the merged model,
so ``from_pretrained`` loads them without peft, plus the adapter state for resuming).

Device and dtype (``trainer.device``, ``trainer.dtype``, resolved by ``hermes_nb.system.devices``): the model,
the optimizer state and every batch live on the device. The dtype is the *compute* dtype: forward passes run
under autocast in it, while the weights that are trained and their Adam moments stay float32. bfloat16 keeps 8
significant bits, so an Adam update below 1/512 to 1/256 of a weight (half its spacing) rounds away: at learning
rates of 1e-5 to 1e-4 bfloat16 weights would barely move. A LoRA base is frozen, so it is stored in the compute
dtype (half the memory); peft keeps its adapters float32. Logprobs and losses are computed in float32 (logits
are upcast before the log-softmax). float16 gradients are loss-scaled (``torch.amp.GradScaler``); bfloat16 has
float32's range and needs none. Checkpoints are float32 whatever the compute dtype (LoRA adapters merged in
float32), and the sampler gets the weights in the compute dtype.

The reference policy of the KL penalty (``reference_forward``): a LoRA run's base with its adapters switched off
(peft's ``disable_adapter``), no second copy of the weights; a full fine-tune's starting weights (or
``reference_weights``), loaded from disk in the compute dtype on the first call, so a run without a KL penalty
never holds them and a resumed run still compares against the weights it started from.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
import threading
from pathlib import Path
from typing import Any

import torch

from hermes_nb.inference.fast_forward import supports as lean_forward_supports
from hermes_nb.inference.sampler import stepper_for
from hermes_nb.protocol.run_files import TRAINER_STATE_FILE
from hermes_nb.system.devices import Hardware, resolve_hardware
from hermes_nb.trainer.local.gpu_clock import GpuClock
from hermes_nb.trainer.local.model_support import lora_targets
from hermes_nb.trainer.local.packing import PackedBatch, can_pack, pack
from hermes_nb.trainer.step.losses import (
    MAX_LOGITS_ELEMENTS,
    LossStats,
    LossSums,
    loss_normaliser,
    policy_loss_sum,
    token_logprobs,
    token_logprobs_and_entropy,
)
from hermes_nb.trainer.types import AdamParams, Datum, ForwardBackwardOutput, LossConfig, OptimStepOutput, SamplerHandle

logger = logging.getLogger(__name__)

PEFT_HINT = "LoRA needs peft: .venv/bin/pip install peft (or pip install 'hermes-nb[lora]')"


def _load_peft() -> Any:
    try:
        import peft
    except ImportError:
        from hermes_nb.errors import ConfigError

        raise ConfigError(f"trainer.lora_rank > 0: {PEFT_HINT}") from None
    return peft


def pad_right(rows: list[list[int]], pad: int) -> torch.Tensor:
    """``[B, T_max]`` with each row right-padded; causal attention makes trailing padding invisible."""
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=torch.long)


def pad_float(rows: list[list[float]]) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [0.0] * (width - len(r)) for r in rows], dtype=torch.float32)


def load_trainer_state(path: Path) -> dict[str, Any]:
    """``trainer_state.pt``, unpickled with ``weights_only``: tensors and plain values load (optimizer state, step,
    RNG states), anything else is refused, so a checkpoint directory copied from elsewhere cannot run code.

    Loaded onto the CPU whatever device saved it (a run trained on CUDA resumes on a machine without one);
    the optimizer and the adapters copy their tensors to the model's device when they take them."""
    import pickle

    from hermes_nb.errors import TransferError

    try:
        state: dict[str, Any] = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(exc))
        what = f"`{found.group(1)}`" if found else "an object"
        raise TransferError(
            f"infra.resume_checkpoint: {path} holds {what}, not only tensors and plain values; refused, as loading "
            "it could run code (hermes-nb's own checkpoints load)"
        ) from None
    return state


def load_weights_into(model: Any, weights_dir: Path, field: str = "infra.init_weights") -> None:
    """Copy every tensor of the model saved in ``weights_dir`` into ``model`` (same architecture, strict)."""
    from transformers import AutoModelForCausalLM

    from hermes_nb.errors import TransferError

    saved = AutoModelForCausalLM.from_pretrained(str(weights_dir), dtype=torch.float32)
    try:
        model.load_state_dict(saved.state_dict())
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0]
        raise TransferError(f"{field}: {weights_dir} does not fit the base model ({first})") from None


def cast_weights(model: Any, dtype: torch.dtype) -> Any:
    """``model`` with its parameters in ``dtype``; buffers keep theirs. ``Module.to(dtype)`` would also round the
    float32 RoPE frequencies (``inv_freq``) that transformers keeps, as ``from_pretrained(dtype=...)`` does."""
    for param in model.parameters():  # tied parameters are one object, listed once: they stay tied
        param.data = param.data.to(dtype)
    return model


def enable_checkpointing(model: Any) -> None:
    """Recompute each decoder layer in the backward pass instead of keeping its activations. Non-reentrant: it
    needs no input that requires grad, which a LoRA model's frozen embeddings are not."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.24 (the old name warns there)
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


class LocalBackend:
    """``model_dir`` gives the architecture and tokenizer; ``init_weights`` (a ``from_pretrained`` directory of
    the same architecture, e.g. another run's checkpoint) replaces its weights before any adapter is added.
    ``device`` and ``dtype`` are ``trainer.device`` / ``trainer.dtype`` settings (``auto`` included).
    ``reference_weights``: the frozen reference of the KL penalty (a ``from_pretrained`` directory of the same
    architecture); None: the weights the run starts from."""

    def __init__(
        self,
        model_dir: Path,
        *,
        lora_rank: int = 0,
        seed: int = 0,
        init_weights: Path | None = None,
        pack_batches: bool = True,
        device: str = "auto",
        dtype: str = "auto",
        gradient_checkpointing: bool = False,
        reference_weights: Path | None = None,
        teacher_weights: Path | None = None,
    ) -> None:
        from transformers import AutoTokenizer

        torch.manual_seed(seed)
        self.hardware: Hardware = resolve_hardware(device, dtype)
        self._model_dir = Path(model_dir)
        self._tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.lora_rank = lora_rank
        self.gradient_checkpointing = gradient_checkpointing
        self._init_weights = Path(init_weights) if init_weights is not None else None
        self._reference_weights = Path(reference_weights) if reference_weights is not None else None
        self._reference_model: Any = None  # loaded by the first reference_forward that needs a copy
        self._teacher_weights = Path(teacher_weights) if teacher_weights is not None else None
        self._teacher_model: Any = None  # loaded by the first teacher_forward
        self.model: Any = self._load_model(init_weights)
        # Shared prompts and repeated completions computed once (exact; hermes_nb.trainer.local.packing). The packed
        # pass carries a KV cache from one forward call into the next: under gradient checkpointing only the lean
        # forward keeps it (transformers turns its cache off then), so other models (LoRA ones too) run unpacked.
        self.pack_batches = pack_batches and (not gradient_checkpointing or lean_forward_supports(self.model))
        self.model.train()
        self._optimizer: torch.optim.Optimizer | None = None
        # float16 gradients underflow without loss scaling; float32 and bfloat16 (float32's range) need none.
        self._scaler = torch.amp.GradScaler(self.hardware.device.type, enabled=self.hardware.dtype == torch.float16)
        self._version = 0
        # GPU time from each forward-backward to its optimizer step, and peak GPU memory (cost.json); CUDA only.
        self._gpu = GpuClock(self.hardware.device)
        self.pad_id = int(self._tokenizer.pad_token_id or self._tokenizer.eos_token_id or 0)

    def _load_model(self, init_weights: Path | None) -> Any:
        from transformers import AutoModelForCausalLM

        # Trained weights stay float32 (see the module doc); a LoRA base is frozen, so it is stored as computed.
        stored = self.hardware.dtype if self.lora_rank > 0 else torch.float32
        model: Any = AutoModelForCausalLM.from_pretrained(str(self._model_dir), dtype=stored)
        if init_weights is not None:
            load_weights_into(model, Path(init_weights))
            logger.info("initial weights loaded from %s", init_weights)
        model.to(self.hardware.device)
        if self.gradient_checkpointing:
            enable_checkpointing(model)
        if self.lora_rank > 0:
            peft = _load_peft()
            targets = lora_targets(model)  # peft's for the architecture, or every linear layer
            lora = peft.LoraConfig(r=self.lora_rank, lora_alpha=2 * self.lora_rank, target_modules=targets)
            model = peft.get_peft_model(model, lora)  # adapters in float32 on any base (autocast_adapter_dtype)
        return model

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def model_name(self) -> str:
        return str(self._model_dir)

    def _vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    def _micro_batches(self, data: list[Datum]) -> list[list[Datum]]:
        width = max(len(d.input_tokens_T) for d in data)
        rows = max(1, MAX_LOGITS_ELEMENTS // (width * self._vocab_size()))
        return [data[i : i + rows] for i in range(0, len(data), rows)]

    def _on_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.to(self.hardware.device)

    def _logits(self, model: Any, batch: list[Datum]) -> tuple[torch.Tensor, torch.Tensor]:
        """The logits of ``model`` over each datum's inputs, and the targets, both right-padded."""
        inputs_BT = self._on_device(pad_right([d.input_tokens_T for d in batch], self.pad_id))
        targets_BT = self._on_device(pad_right([d.target_tokens_T for d in batch], self.pad_id))
        with self.hardware.autocast():
            logits_BTV = model(input_ids=inputs_BT, use_cache=False).logits
        return logits_BTV, targets_BT

    def _logprobs(self, batch: list[Datum]) -> torch.Tensor:
        """``[B, T]`` float32 logprobs of each datum's targets (the logits are upcast before the log-softmax)."""
        return token_logprobs(*self._logits(self.model, batch))

    def _forward_with(self, model: Any, data: list[Datum]) -> list[list[float]]:
        out: list[list[float]] = []
        with torch.no_grad():
            for batch in self._micro_batches(data):
                logp_BT = token_logprobs(*self._logits(model, batch)).cpu()  # one transfer, not one per row
                out += [logp_BT[i, : len(d.input_tokens_T)].tolist() for i, d in enumerate(batch)]
        return out

    def forward(self, data: list[Datum]) -> list[list[float]]:
        return self._forward_with(self.model, data)

    def reference_forward(self, data: list[Datum]) -> list[list[float]]:
        """Logprobs of each datum's targets under the frozen reference policy (see the module doc), no gradient."""
        if self.lora_rank > 0 and self._reference_weights is None:
            with self.model.disable_adapter():
                return self._forward_with(self.model, data)
        return self._forward_with(self._reference(), data)

    def _reference(self) -> Any:
        if self._reference_model is None:
            source = self._reference_weights or self._model_dir
            init = self._init_weights if self._reference_weights is None else None
            self._reference_model = self._frozen_model(source, init)
            logger.info("reference policy loaded from %s", self._reference_weights or self._init_weights or source)
        return self._reference_model

    def teacher_forward(self, data: list[Datum]) -> list[list[float]]:
        """Logprobs of each datum's targets under the distillation's teacher (``teacher_weights``), no gradient."""
        if self._teacher_weights is None:
            raise ValueError("trainer.teacher_model: this run has no teacher (infra.teacher_weights is unset)")
        if self._teacher_model is None:
            self._teacher_model = self._frozen_model(self._teacher_weights, None)
            logger.info("teacher loaded from %s", self._teacher_weights)
        return self._forward_with(self._teacher_model, data)

    def _frozen_model(self, source: Path, init_weights: Path | None) -> Any:
        """A second model in this process that takes no gradient (the reference or the teacher), as computed."""
        from transformers import AutoModelForCausalLM

        # float32 first, then cast: from_pretrained(dtype=...) would also round the RoPE buffers (cast_weights).
        model: Any = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.float32)
        if init_weights is not None:
            load_weights_into(model, init_weights)
        model = cast_weights(model, self.hardware.dtype).to(self.hardware.device)
        model.eval()
        model.requires_grad_(False)
        return model

    def _packed_logprobs(self, packed: PackedBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logprobs of each row's continuation targets, and the entropy where they are trained: contexts once into
        a KV cache, then the continuations on top of it, with gradients through both passes
        (``hermes_nb.trainer.local.packing``)."""
        with self.hardware.autocast():
            stepper = stepper_for(self.model)  # built now: it fuses this step's weights
            stepper.prefill(packed.context_ids_PC, packed.context_mask_PC, packed.context_positions_PC)
            stepper.select(packed.row_context_R)
            logits_RSV = stepper.extend(packed.ids_RS, packed.continuation_mask_RCS, packed.positions_RS)
        return token_logprobs_and_entropy(logits_RSV, packed.targets_RS, packed.weights_RS)

    def _optional_rows(self, batch: list[Datum], field: str) -> torch.Tensor | None:
        """An optional logprob field of every datum, right-padded on the device; None when no datum has it."""
        rows = [getattr(d, field) for d in batch]
        if all(r is None for r in rows):
            return None
        if any(r is None for r in rows):
            raise ValueError(f"{field}: some datums of the batch have it and some do not")
        return self._on_device(pad_float(rows))

    def _loss_sums(self, batch: list[Datum], loss_fn: str, config: LossConfig | None) -> LossSums:
        if self.pack_batches and can_pack(batch):
            packed = pack(batch, self.pad_id)
            packed = dataclasses.replace(
                packed,
                **{
                    f.name: self._on_device(value)
                    for f in dataclasses.fields(packed)
                    if (value := getattr(packed, f.name)) is not None
                },
            )
            logprobs_RS, entropy_RS = self._packed_logprobs(packed)
            return policy_loss_sum(
                loss_fn,
                logprobs_RS,
                packed.sampling_logprobs_RS,
                packed.advantages_RS,
                packed.weights_RS,
                config,
                packed.counts_R,
                old_logprobs_BT=packed.old_logprobs_RS,
                reference_logprobs_BT=packed.reference_logprobs_RS,
                entropy_BT=entropy_RS,
            )
        weights_BT = self._on_device(pad_float([d.weights_T for d in batch]))
        logprobs_BT, entropy_BT = token_logprobs_and_entropy(*self._logits(self.model, batch), weights_BT)
        return policy_loss_sum(
            loss_fn,
            logprobs_BT,
            self._on_device(pad_float([d.sampling_logprobs_T for d in batch])),
            self._on_device(pad_float([d.advantages_T for d in batch])),
            weights_BT,
            config,
            old_logprobs_BT=self._optional_rows(batch, "old_logprobs_T"),
            reference_logprobs_BT=self._optional_rows(batch, "reference_logprobs_T"),
            entropy_BT=entropy_BT,
        )

    def forward_backward(
        self, data: list[Datum], loss_fn: str, loss_fn_config: LossConfig | None = None
    ) -> ForwardBackwardOutput:
        total = sum(d.num_trained_tokens for d in data)
        if total == 0:
            return ForwardBackwardOutput(loss=0.0, num_trained_tokens=0)
        config = loss_fn_config or LossConfig()
        self._gpu.begin()
        # Every datum is a sequence of the batch (grpo and dr_grpo count them; see hermes_nb.trainer.step.losses).
        normaliser = loss_normaliser(config, total, len(data))
        loss = 0.0
        stats = LossStats()
        for batch in self._micro_batches(data):
            sums = self._loss_sums(batch, loss_fn, config)
            # Divide by the whole batch's normaliser so micro-batches add up to the batch's loss.
            self._scaler.scale(sums.loss / normaliser).backward()
            loss += float(sums.loss.detach())
            stats = stats + sums.stats
        return ForwardBackwardOutput(loss=loss / normaliser, num_trained_tokens=total, metrics=stats.metrics(config))

    def _trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def _ensure_optimizer(self, adam: AdamParams) -> torch.optim.Optimizer:
        if self._optimizer is None:
            # fused: one kernel for every parameter; 1.1 ms per step against 4.1 ms for the per-tensor loop
            self._optimizer = torch.optim.AdamW(self._trainable(), lr=adam.learning_rate, fused=True)
        for group in self._optimizer.param_groups:
            group.update(
                lr=adam.learning_rate, betas=(adam.beta1, adam.beta2), eps=adam.eps, weight_decay=adam.weight_decay
            )
        return self._optimizer

    def optim_step(self, adam: AdamParams) -> OptimStepOutput:
        optimizer = self._ensure_optimizer(adam)
        params = self._trainable()
        if all(p.grad is None for p in params):
            # Nothing was trained since the last step: Adam skips gradient-less parameters anyway, and a loss
            # scaler would refuse a step that recorded no gradient to check.
            self._gpu.end()
            return OptimStepOutput(
                metrics={"grad_norm": 0.0, "learning_rate": adam.learning_rate, **self._gpu.figures()}
            )
        self._scaler.unscale_(optimizer)  # clipping sees the true gradients (no-op unless float16)
        max_norm = adam.max_grad_norm if adam.max_grad_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        self._scaler.step(optimizer)  # skipped, and the scale lowered, when float16 gradients overflowed
        self._scaler.update()
        optimizer.zero_grad(set_to_none=True)
        self._gpu.end()
        return OptimStepOutput(
            metrics={"grad_norm": grad_norm, "learning_rate": adam.learning_rate, **self._gpu.figures()}
        )

    def _plain_model(self) -> Any:
        """A detached float32 copy without adapters, in eval mode. Adapters are merged in float32: merged into a
        bfloat16 base, their updates (small next to the base weights) would mostly round away."""
        snapshot: Any = copy.deepcopy(self.model)
        if self.lora_rank > 0:
            snapshot = cast_weights(snapshot, torch.float32).merge_and_unload()
        snapshot.eval()
        snapshot.requires_grad_(False)
        return snapshot

    def save_state(self, path: Path, extra: dict[str, Any]) -> None:
        """The model in float32 (``from_pretrained`` loads it without peft), its tokenizer, and the trainer state
        (optimizer, loss scale, LoRA adapters, ``extra``)."""
        path.mkdir(parents=True, exist_ok=True)
        # A full fine-tune's weights are float32 already and have no adapter: saved as they are, without a copy.
        (self._plain_model() if self.lora_rank > 0 else self.model).save_pretrained(str(path))
        self._tokenizer.save_pretrained(str(path))
        state: dict[str, Any] = dict(extra)
        state["optimizer"] = self._optimizer.state_dict() if self._optimizer is not None else None
        if self._scaler.is_enabled():
            state["grad_scaler"] = self._scaler.state_dict()
        if self.lora_rank > 0:
            state["adapter"] = _load_peft().get_peft_model_state_dict(self.model)
        torch.save(state, path / TRAINER_STATE_FILE)

    def load_state(self, path: Path) -> dict[str, Any]:
        state = load_trainer_state(path / TRAINER_STATE_FILE)
        if self.lora_rank > 0:
            _load_peft().set_peft_model_state_dict(self.model, state["adapter"])
        else:
            load_weights_into(self.model, path, "infra.resume_checkpoint")
        optimizer_state = state.pop("optimizer", None)
        if optimizer_state is not None:
            self._optimizer = torch.optim.AdamW(self._trainable(), lr=1e-3, fused=True)
            self._optimizer.load_state_dict(optimizer_state)  # moved to the parameters' device
        scaler_state = state.pop("grad_scaler", None)
        if scaler_state is not None and self._scaler.is_enabled():
            self._scaler.load_state_dict(scaler_state)
        state.pop("adapter", None)
        return state

    fault: Exception | None = None  # everything it trains lives in this process: nothing to watch

    def watch(self, stop: threading.Event) -> None:
        return

    def sampler_model(self) -> Any:
        """A frozen copy of the current model, on the device in the compute dtype, for an in-process sampler to
        own; later weights reach it as the state dicts of ``save_weights_for_sampler``."""
        return cast_weights(self._plain_model(), self.hardware.dtype)

    def save_weights_for_sampler(self, name: str) -> SamplerHandle:
        """The current weights as a state dict of fresh tensors in the compute dtype (training never touches them
        again), for ``InferenceEngine.publish_weights``. A copy of the tensors costs well under a millisecond
        here; a deep copy of the module cost ~10 ms per step."""
        self._version += 1
        model = self.model.get_base_model() if self.lora_rank > 0 else self.model
        parameters = {key for key, _ in model.named_parameters(remove_duplicate=False)}
        # By the storage copied (an adapted layer's merged weight first): tied weights, the input and output
        # embeddings, are handed over as one copy.
        copies = self._merged_adapted_weights() if self.lora_rank > 0 else {}
        weights = {}
        for key, tensor in model.state_dict().items():
            if any(part.startswith("lora_") for part in key.split(".")):
                continue  # the adapters: merged into their layers' weights
            plain_key = key.replace(".base_layer.", ".")  # an adapted layer's own weights, as a plain model names them
            if tensor.data_ptr() not in copies:
                # Parameters in the compute dtype, as the sampler's model holds them; buffers keep their own.
                dtype = self.hardware.dtype if key in parameters else tensor.dtype
                copies[tensor.data_ptr()] = tensor.detach().to(dtype, copy=True)
            weights[plain_key] = copies[tensor.data_ptr()]
        return SamplerHandle(name=name, version=self._version, policy=weights)

    def _merged_adapted_weights(self) -> dict[int, torch.Tensor]:
        """Each adapted layer's weight with its adapters' update added in float32 (merged into a bfloat16 base, the
        updates would mostly round away), then in the compute dtype, by the storage of the base weight it replaces
        (a weight tied to it is replaced too, as ``merge_and_unload`` would). One layer at a time, with no copy of
        the model to merge into: at 500M such a copy more than doubled the hand-over's time and memory
        (``bench/lora_handover.py``)."""
        from peft.tuners.lora import LoraLayer

        merged: dict[int, torch.Tensor] = {}
        layers: list[Any] = [module for module in self.model.modules() if isinstance(module, LoraLayer)]
        with torch.no_grad():
            for layer in layers:
                base = layer.get_base_layer().weight
                weight = base.float()  # a new tensor when the base is not float32: added to in place below
                weight = weight.clone() if weight is base else weight
                for adapter in layer.active_adapters:
                    weight += layer.get_delta_weight(adapter).float()
                merged[base.data_ptr()] = weight.to(self.hardware.dtype)  # as the sampler holds its parameters
        return merged
