"""The ``local`` backend: torch on this machine, any Hugging Face causal LM from a local directory.

Full fine-tune by default; LoRA through ``peft`` when ``lora_rank > 0`` (checkpoints then hold the merged model,
so ``from_pretrained`` loads them without peft, plus the adapter state for resuming).
"""

from __future__ import annotations

import copy
import logging
import re
from pathlib import Path
from typing import Any

import torch

from hermes_nb.inference.sampler import stepper_for
from hermes_nb.protocol.run_layout import TRAINER_STATE_FILE
from hermes_nb.trainer.losses import LossSums, policy_loss_sum, token_logprobs
from hermes_nb.trainer.packing import PackedBatch, can_pack, pack
from hermes_nb.trainer.types import AdamParams, Datum, ForwardBackwardOutput, LossConfig, OptimStepOutput, SamplerHandle

logger = logging.getLogger(__name__)

# Upper bound on logits elements (rows x positions x vocab) per forward pass: 64M float32 = 256 MB, so a large
# vocabulary or batch is split into micro-batches instead of exhausting memory. Gradients accumulate exactly.
MAX_LOGITS_ELEMENTS = 64 * 1024 * 1024
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
    RNG states), anything else is refused, so a checkpoint directory copied from elsewhere cannot run code."""
    import pickle

    from hermes_nb.errors import TransferError

    try:
        state: dict[str, Any] = torch.load(path, weights_only=True)
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


class LocalBackend:
    """``model_dir`` gives the architecture and tokenizer; ``init_weights`` (a ``from_pretrained`` directory of
    the same architecture, e.g. another run's checkpoint) replaces its weights before any adapter is added."""

    def __init__(
        self,
        model_dir: Path,
        *,
        lora_rank: int = 0,
        seed: int = 0,
        init_weights: Path | None = None,
        pack_batches: bool = True,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.manual_seed(seed)
        self._model_dir = Path(model_dir)
        self._tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
        if init_weights is not None:
            load_weights_into(model, Path(init_weights))
            logger.info("initial weights loaded from %s", init_weights)
        self.lora_rank = lora_rank
        # Shared prompts and repeated completions computed once (exact; hermes_nb.trainer.packing).
        self.pack_batches = pack_batches
        if lora_rank > 0:
            peft = _load_peft()
            lora = peft.LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, target_modules="all-linear")
            model = peft.get_peft_model(model, lora)
        self.model: Any = model
        self.model.train()
        self._optimizer: torch.optim.Optimizer | None = None
        self._version = 0
        self.pad_id = int(self._tokenizer.pad_token_id or self._tokenizer.eos_token_id or 0)

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

    def _logprobs(self, batch: list[Datum]) -> torch.Tensor:
        inputs_BT = pad_right([d.input_tokens_T for d in batch], self.pad_id)
        targets_BT = pad_right([d.target_tokens_T for d in batch], self.pad_id)
        logits_BTV = self.model(input_ids=inputs_BT, use_cache=False).logits
        return token_logprobs(logits_BTV, targets_BT)

    def forward(self, data: list[Datum]) -> list[list[float]]:
        out: list[list[float]] = []
        with torch.no_grad():
            for batch in self._micro_batches(data):
                logp_BT = self._logprobs(batch)
                out += [logp_BT[i, : len(d.input_tokens_T)].tolist() for i, d in enumerate(batch)]
        return out

    def _packed_logprobs(self, packed: PackedBatch) -> torch.Tensor:
        """Logprobs of each row's continuation targets: contexts once into a KV cache, then the continuations
        on top of it, with gradients through both passes (``hermes_nb.trainer.packing``)."""
        stepper = stepper_for(self.model)  # built now: it fuses this step's weights
        stepper.prefill(packed.context_ids_PC, packed.context_mask_PC, packed.context_positions_PC)
        stepper.select(packed.row_context_R)
        logits_RSV = stepper.extend(packed.ids_RS, packed.continuation_mask_RCS, packed.positions_RS)
        return token_logprobs(logits_RSV, packed.targets_RS)

    def _loss_sums(self, batch: list[Datum], loss_fn: str, config: LossConfig | None) -> LossSums:
        if self.pack_batches and can_pack(batch):
            packed = pack(batch, self.pad_id)
            return policy_loss_sum(
                loss_fn,
                self._packed_logprobs(packed),
                packed.sampling_logprobs_RS,
                packed.advantages_RS,
                packed.weights_RS,
                config,
                packed.counts_R,
            )
        return policy_loss_sum(
            loss_fn,
            self._logprobs(batch),
            pad_float([d.sampling_logprobs_T for d in batch]),
            pad_float([d.advantages_T for d in batch]),
            pad_float([d.weights_T for d in batch]),
            config,
        )

    def forward_backward(
        self, data: list[Datum], loss_fn: str, loss_fn_config: LossConfig | None = None
    ) -> ForwardBackwardOutput:
        total = sum(d.num_trained_tokens for d in data)
        if total == 0:
            return ForwardBackwardOutput(loss=0.0, num_trained_tokens=0)
        loss = ratio = clipped = log_ratio = 0.0
        for batch in self._micro_batches(data):
            sums = self._loss_sums(batch, loss_fn, loss_fn_config)
            # Divide by the whole batch's token count so micro-batches add up to the token-mean.
            (sums.loss / total).backward()
            loss += float(sums.loss.detach())
            ratio, clipped, log_ratio = ratio + sums.ratio, clipped + sums.clipped, log_ratio + sums.log_ratio
        metrics = {
            "ratio_mean": ratio / total,
            "clip_fraction": clipped / total,
            "kl_sample_current": -log_ratio / total,
        }
        return ForwardBackwardOutput(loss=loss / total, num_trained_tokens=total, metrics=metrics)

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
        max_norm = adam.max_grad_norm if adam.max_grad_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return OptimStepOutput(metrics={"grad_norm": grad_norm, "learning_rate": adam.learning_rate})

    def _plain_model(self) -> Any:
        """A detached copy without adapters: what samplers and ``from_pretrained`` get."""
        snapshot: Any = copy.deepcopy(self.model)
        if self.lora_rank > 0:
            snapshot = snapshot.merge_and_unload()
        snapshot.eval()
        snapshot.requires_grad_(False)
        return snapshot

    def save_state(self, path: Path, extra: dict[str, Any]) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self._plain_model().save_pretrained(str(path))
        self._tokenizer.save_pretrained(str(path))
        state: dict[str, Any] = dict(extra)
        state["optimizer"] = self._optimizer.state_dict() if self._optimizer is not None else None
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
            self._optimizer.load_state_dict(optimizer_state)
        state.pop("adapter", None)
        return state

    def sampler_model(self) -> Any:
        """A frozen copy of the current model for an in-process sampler to own; later weights reach it as the
        state dicts of ``save_weights_for_sampler``."""
        return self._plain_model()

    def save_weights_for_sampler(self, name: str) -> SamplerHandle:
        """The current weights as a state dict of fresh tensors (training never touches them again), for
        ``InferenceEngine.publish_weights``. A copy of the tensors costs well under a millisecond here; a deep
        copy of the module cost ~10 ms per step."""
        self._version += 1
        if self.lora_rank > 0:
            weights = self._plain_model().state_dict()  # merging the adapters needs a copy of the model anyway
        else:
            weights = {key: tensor.detach().clone() for key, tensor in self.model.state_dict().items()}
        return SamplerHandle(name=name, version=self._version, policy=weights)
