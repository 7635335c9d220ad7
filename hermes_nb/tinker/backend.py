"""``trainer.backend: tinker``: the training loop's backend on a Tinker API server, through the official SDK.

The server holds the model: a LoRA adapter of rank ``trainer.lora_rank`` on ``trainer.base_model`` (a name the
server offers; ``embedded`` names the shipped model's directory, which a self-hosted server on this machine can
load). ``forward_backward`` sends the batch with Tinker's own ``importance_sampling`` / ``ppo`` losses
(``hermes_nb.tinker.datums`` keeps hermes-nb's token-mean), ``optim_step`` the run's Adam settings, and
after each step the new weights are published for sampling (``save_weights_and_get_sampling_client``) to the
run's inference server (``hermes_nb.tinker.engine``).

Checkpoints stay on the server (``save_state``: weights and optimizer, for resume; ``save_weights_for_sampler``:
the weights to sample from or download). The run directory's ``checkpoints/step_<N>/`` records them: their
``tinker://`` paths (``tinker_checkpoint.json``), the step and RNG states (``trainer_state.pt``), and the base
model's ``config.json`` and tokenizer, so that resume, transfer and ``rl_test_inference`` find it like a local one.
"""

from __future__ import annotations

import concurrent.futures
import logging
import shutil
import threading
import types
from pathlib import Path
from typing import Any

from hermes_nb.config import RunConfig
from hermes_nb.errors import TinkerError
from hermes_nb.protocol.run_files import TRAINER_STATE_FILE
from hermes_nb.protocol.tinker import (
    TinkerCheckpoint,
    TinkerRunInfo,
    read_checkpoint,
    write_checkpoint,
    write_run_info,
)
from hermes_nb.tinker import datums as tinker_datums
from hermes_nb.tinker.calls import (
    RemoteCalls,
    check_algorithm,
    check_base_model,
    connect,
    import_tinker,
    in_thread,
    sdk_version,
    tinker_model_name,
)
from hermes_nb.tinker.engine import SamplingStats, TinkerSampler
from hermes_nb.trainer.types import AdamParams, Datum, ForwardBackwardOutput, LossConfig, OptimStepOutput, SamplerHandle

logger = logging.getLogger(__name__)

# compute_logprobs calls of the KL reference in flight at once: a batch's sequences are scored together, as the
# sampler's requests are, without opening a connection per sequence.
REFERENCE_CALLS_IN_FLIGHT = 16


def sampler_weights_path(path: str) -> str:
    """``tinker://<run>/sampler_weights/<id>``, the form the SDK parses. SkyRL 0.3.0 answers
    ``save_weights_for_sampler`` with ``tinker://<run>/<id>`` for the same weights."""
    parts = path.removeprefix("tinker://").split("/")
    if len(parts) == 2:
        return f"tinker://{parts[0]}/sampler_weights/{parts[1]}"
    return path


def local_model_config(base_model: str) -> Any:
    """The base model's config when its directory is on this machine (the server reads
    ``max_position_embeddings``); otherwise a config that states no limit, leaving that check to Tinker."""
    path = Path(tinker_model_name(base_model)).expanduser()
    if (path / "config.json").is_file():
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(str(path))
    return types.SimpleNamespace(max_position_embeddings=None)


class TinkerBackend:
    """A ``TrainingBackend`` whose model lives on a Tinker server. Blocking calls go through ``RemoteCalls``."""

    def __init__(self, config: RunConfig) -> None:
        trainer = config.trainer
        if trainer.lora_rank <= 0:
            raise TinkerError("trainer.lora_rank: Tinker trains LoRA adapters only; set a rank >= 1 (e.g. 32)")
        check_algorithm(config)
        self._tinker = import_tinker()
        self.base_model = tinker_model_name(trainer.base_model)
        self.lora_rank = trainer.lora_rank
        self.calls = RemoteCalls(config.tinker.base_url, config.tinker.give_up_after_s)
        self._run_dir = Path(config.infra.run_dir) if config.infra.run_dir else None
        self.service = connect(config.tinker.base_url)
        check_base_model(self.service, self.base_model, self.calls)
        self.training = self.calls.wait(
            "create_lora_training_client",
            lambda: in_thread(
                lambda: self.service.create_lora_training_client(
                    base_model=self.base_model, rank=trainer.lora_rank, seed=trainer.seed
                )
            ),
        )
        self._tokenizer = self.calls.wait("get_tokenizer", lambda: in_thread(self.training.get_tokenizer))
        self._model_config = local_model_config(trainer.base_model)
        self.stats = SamplingStats()
        self.tokens_trained = 0
        self.last_checkpoint: str | None = None
        self._version = 0
        self._saves = 0
        self._info_lock = threading.Lock()
        # Set by ``watch`` when the server stayed away while the trainer waited for a batch.
        self.fault: TinkerError | None = None
        self._reference: Any = None  # the KL reference's sampling client, made when first asked for
        self._teacher_path = config.infra.teacher_weights  # the teacher's sampler weights (tinker://...), if any
        self._teacher: Any = None  # the teacher's sampling client, made when first asked for
        self.calls.on_retry = self.write_info
        if config.infra.init_weights:
            self._load_initial_weights(Path(config.infra.init_weights))
        logger.info(
            "Tinker: LoRA rank %d on %s at %s (tinker SDK %s)",
            self.lora_rank,
            self.base_model,
            self.calls.url,
            sdk_version(),
        )
        self.write_info()

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def model_name(self) -> str:
        return self.base_model

    def _load_initial_weights(self, path: Path) -> None:
        """Transfer: the weights (not the optimizer) of a Tinker checkpoint of the same base model."""
        saved = read_checkpoint(path)
        if saved is None:
            raise TinkerError(
                f"infra.init_weights: {path} is not a Tinker checkpoint; a Tinker run starts from the server's base "
                "model or from a Tinker run's checkpoint (a local model directory can be served as trainer.base_model "
                "by a self-hosted server instead)"
            )
        self._check_same_model(saved, "trainer.pretrained_model_path")
        self.calls.wait("load_state", lambda: self.training.load_state(path=saved.state_path))

    def _check_same_model(self, saved: TinkerCheckpoint, field: str) -> None:
        if saved.base_model != self.base_model or saved.lora_rank != self.lora_rank:
            raise TinkerError(
                f"{field}: that checkpoint is LoRA rank {saved.lora_rank} on {saved.base_model!r}; this run trains "
                f"rank {self.lora_rank} on {self.base_model!r}; set trainer.base_model and trainer.lora_rank to match"
            )

    def forward(self, data: list[Datum]) -> list[list[float]]:
        batch = tinker_datums.to_tinker_forward(self._tinker, data)
        output = self.calls.wait("forward", lambda: self.training.forward(data=batch, loss_fn="cross_entropy"))
        return tinker_datums.returned_logprobs(output)

    def _reference_client(self) -> Any:
        """A sampling client of the base model (the frozen reference of the KL penalty), made on first use."""
        if self._reference is None:
            self._reference = self.calls.wait(
                "create_sampling_client",
                lambda: in_thread(lambda: self.service.create_sampling_client(base_model=self.base_model)),
            )
        return self._reference

    def reference_forward(self, data: list[Datum]) -> list[list[float]]:
        """The base model's logprobs of each datum's targets, by the server's ``compute_logprobs`` (as
        tinker-cookbook scores its KL reference), the sequences in flight together."""
        return self._scored_by(self._reference_client(), data)

    def teacher_forward(self, data: list[Datum]) -> list[list[float]]:
        """The teacher's logprobs of each datum's targets (``infra.teacher_weights``: a Tinker checkpoint's
        sampler weights on the run's base model), by ``compute_logprobs`` as the reference is scored."""
        if self._teacher_path is None:
            raise TinkerError("trainer.teacher_model: this run has no teacher (infra.teacher_weights is unset)")
        if self._teacher is None:
            path = self._teacher_path
            self._teacher = self.calls.wait(
                "create_sampling_client",
                lambda: in_thread(lambda: self.service.create_sampling_client(model_path=path)),
            )
        return self._scored_by(self._teacher, data)

    def _scored_by(self, client: Any, data: list[Datum]) -> list[list[float]]:
        tinker = self._tinker

        def score(datum: Datum) -> list[float]:
            prompt = tinker.ModelInput.from_ints(tokens=tinker_datums.reference_prompt(datum))
            answer = self.calls.wait("compute_logprobs", lambda: client.compute_logprobs(prompt))
            return tinker_datums.aligned_reference_logprobs(datum, answer)

        with concurrent.futures.ThreadPoolExecutor(max_workers=REFERENCE_CALLS_IN_FLIGHT) as pool:
            return list(pool.map(score, data))

    def forward_backward(
        self, data: list[Datum], loss_fn: str, loss_fn_config: LossConfig | None = None
    ) -> ForwardBackwardOutput:
        if not data or tinker_datums.total_trained_tokens(data) == 0:
            return ForwardBackwardOutput(loss=0.0, num_trained_tokens=0)
        penalty = loss_fn_config.beta if loss_fn_config is not None else 0.0
        if loss_fn_config is not None and penalty > 0:
            data = tinker_datums.with_kl_penalty(data, penalty)
            loss_fn_config = loss_fn_config.model_copy(update={"beta": 0.0})  # the penalty is in the advantages now
        batch = tinker_datums.to_tinker(self._tinker, data)
        options = tinker_datums.loss_fn_config(loss_fn, loss_fn_config)
        output = self.calls.wait(
            "forward_backward",
            lambda: self.training.forward_backward(data=batch, loss_fn=loss_fn, loss_fn_config=options),
        )
        result = tinker_datums.step_output(data, tinker_datums.returned_logprobs(output), loss_fn, loss_fn_config)
        if penalty > 0:
            result.metrics["kl"] = tinker_datums.mean_sampled_kl(data)
        self.tokens_trained += result.num_trained_tokens
        return result

    def optim_step(self, adam: AdamParams) -> OptimStepOutput:
        params = self._tinker.AdamParams(
            learning_rate=adam.learning_rate,
            beta1=adam.beta1,
            beta2=adam.beta2,
            eps=adam.eps,
            weight_decay=adam.weight_decay,
            grad_clip_norm=adam.max_grad_norm,
        )
        response = self.calls.wait("optim_step", lambda: self.training.optim_step(adam_params=params))
        metrics = getattr(response, "metrics", None) or {}
        return OptimStepOutput(metrics={k: float(v) for k, v in metrics.items() if isinstance(v, int | float)})

    def save_state(self, path: Path, extra: dict[str, Any]) -> str:
        """State and sampler weights saved on the server; their paths, ``extra`` and the model's config and
        tokenizer in ``path``. Returns the state's ``tinker://`` path."""
        import torch

        self._saves += 1
        name = f"step_{extra.get('step', 0)}_{self._saves}"
        state = self.calls.wait("save_state", lambda: self.training.save_state(name=name))
        sampler = self.calls.wait("save_weights_for_sampler", lambda: self.training.save_weights_for_sampler(name=name))
        path.mkdir(parents=True, exist_ok=True)
        checkpoint = TinkerCheckpoint(
            state_path=state.path,
            sampler_path=sampler_weights_path(str(sampler.path)),
            base_model=self.base_model,
            lora_rank=self.lora_rank,
            base_url=self.calls.url,
        )
        write_checkpoint(path, checkpoint)
        torch.save({**extra, "tinker_state_path": state.path}, path / TRAINER_STATE_FILE)
        self._save_model_files(path)
        self.last_checkpoint = state.path
        self.write_info()
        return str(state.path)

    def _save_model_files(self, path: Path) -> None:
        """The base model's config and the tokenizer: what tells a reader which model this adapter belongs to."""
        self._tokenizer.save_pretrained(str(path))
        local = Path(self.base_model).expanduser() / "config.json"
        if local.is_file():
            shutil.copyfile(local, path / "config.json")
        elif hasattr(self._model_config, "save_pretrained"):
            self._model_config.save_pretrained(str(path))

    def load_state(self, path: Path) -> dict[str, Any]:
        """Resume: weights and optimizer from the checkpoint's Tinker state; returns its ``extra``."""
        from hermes_nb.trainer.local.local_backend import load_trainer_state

        saved = read_checkpoint(path)
        if saved is None:
            raise TinkerError(f"infra.resume_checkpoint: {path} is not a Tinker checkpoint (no tinker_checkpoint.json)")
        self._check_same_model(saved, "trainer.resume_from")
        self.calls.wait(
            "load_state_with_optimizer", lambda: self.training.load_state_with_optimizer(path=saved.state_path)
        )
        state = load_trainer_state(path / TRAINER_STATE_FILE)
        state.pop("tinker_state_path", None)
        self.last_checkpoint = saved.state_path
        return state

    def _sampler(self) -> TinkerSampler:
        publish = self.training.save_weights_and_get_sampling_client
        client = self.calls.wait("save_weights_and_get_sampling_client", lambda: in_thread(publish))
        return TinkerSampler(client=client, config=self._model_config, stats=self.stats)

    def sampler_model(self) -> TinkerSampler:
        """A sampler of the current weights, for the run's inference server (``TinkerEngine``)."""
        return self._sampler()

    def save_weights_for_sampler(self, name: str) -> SamplerHandle:
        self._version += 1
        sampler = self._sampler()
        self.write_info()
        return SamplerHandle(name=name, version=self._version, policy=sampler)

    def info(self) -> TinkerRunInfo:
        return TinkerRunInfo(
            base_url=self.calls.url,
            base_model=self.base_model,
            lora_rank=self.lora_rank,
            sdk_version=sdk_version(),
            tokens_trained=self.tokens_trained,
            tokens_sampled=self.stats.tokens_sampled,
            sample_requests=self.stats.requests,
            retries=self.calls.retries,
            rate_limited=self.calls.rate_limited,
            last_error=self.calls.last_error,
            last_checkpoint=self.last_checkpoint,
        )

    def write_info(self) -> None:
        if self._run_dir is None or not self._run_dir.is_dir():
            return
        with self._info_lock:  # the watch thread writes too
            write_run_info(self._run_dir, self.info())

    def watch(self, stop: threading.Event) -> None:
        """Until ``stop`` is set: probe the server while the trainer waits for batches (no call of its own would
        notice the server going away then). Once it has been away for ``tinker.give_up_after_s``, the error is
        kept in ``fault`` and ``stop`` is set; the trainer then raises ``fault`` (``hermes_nb.trainer.run.main``)."""
        threading.Thread(target=self._watch, args=(stop,), name="tinker-watch", daemon=True).start()

    def _watch(self, stop: threading.Event) -> None:
        while not stop.wait(self.calls.probe_every_s):
            if self.calls.server_gone():
                self.fault = self.calls.unavailable("its health checks", self.calls.last_error or "none")
                logger.error("%s", self.fault)
                stop.set()
                return
