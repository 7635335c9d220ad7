"""The one model of a run's configuration: environment fields, trainer, W&B, and the locked infrastructure.

``RunConfig`` is what is saved as ``config.yaml`` in a run directory and handed to every process of the run
(``--config``). ``env`` holds the selected environment's own config fields as plain values; they are
validated against that environment's schema (read in a child process, see ``hermes_nb.selection.schema``).
Locked fields (``LOCKED_FIELDS``) are decided by the run system and refused by edits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hermes_nb.errors import ConfigError
from hermes_nb.health import HEALTH_CHECKS
from hermes_nb.objectives import CISPO, OBJECTIVES, objective_names
from hermes_nb.system.devices import DTypeName, device_syntax_problem
from hermes_nb.system.home import embedded_base_model_dir, embedded_chat_model_dir

EMBEDDED_BASE_MODEL = "embedded"
# The shipped Qwen3 chat model with a tool-calling template (agent environments; docs/chat_model.md).
EMBEDDED_CHAT_MODEL = "embedded-chat"

# How per-token losses become the batch's loss, by TRL's names (GRPOConfig.loss_type); hermes_nb.trainer.step.losses.
LossAggregation = Literal["dapo", "bnpo", "grpo", "dr_grpo"]
ImportanceSamplingLevel = Literal["token", "sequence"]
RewardScaling = Literal["group", "batch", "none"]
KLEstimator = Literal["k1", "k2", "k3"]
LRSchedule = Literal["constant", "linear", "cosine"]
# The trainer fields that choose the RL algorithm (a variant is a set of these), in the order a user reads them:
# the objective, its ratio and clipping, the advantages, the passes, the batch, the KL, the schedule.
ALGORITHM_FIELDS = (
    "loss",
    "loss_type",
    "importance_sampling_level",
    "epsilon",
    "epsilon_high",
    "scale_rewards",
    "num_iterations",
    "mask_truncated_completions",
    "dynamic_sampling",
    "beta",
    "kl_estimator",
    "reference_model",
    "teacher_model",
    "teacher_kl_coef",
    "lr_scheduler_type",
    "warmup_steps",
    "importance_sampling_cap",
)
BackendName = Literal["local", "tinker"]
# Which engine samples for a local run (hermes_nb.runs.sampler_choice decides auto; the launcher records the outcome
# in infra.sampler).
SamplerName = Literal["auto", "native", "vllm"]
WandbMode = Literal["auto", "online", "offline", "disabled"]
# What an environment is written against: the name of a registered framework adapter (hermes_nb.frameworks.registry:
# hermes-nb's own BaseEnv, atroposlib's, or one registered from outside), checked against the registry where it is
# used (an unknown name is refused naming the registered ones). The default is hermes-nb's own.
EnvFramework = str
DEFAULT_FRAMEWORK = "hermes_nb"


# The settings every environment has live here, not in ``hermes_nb.env``, so that the run's config (which reads
# their defaults and locked names) imports nothing of the environment package, whose processes import this module.
# ``hermes_nb.env`` re-exports both: environment authors import them from there.

# Infrastructure: filled in by the run system; shown, never edited by a user.
LOCKED_ENV_FIELDS = frozenset({"tokenizer_name", "rollout_server_url", "data_path_to_save_groups"})


class BaseEnvConfig(BaseModel):
    """Settings every environment has. Subclass it to add an environment's own fields."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    group_size: int = Field(default=16, ge=2, le=256, description="Completions sampled per prompt (one group).")
    max_num_workers: int = Field(default=8, ge=1, le=256, description="Groups collected concurrently.")
    max_eval_workers: int = Field(default=16, ge=1, le=256, description="Concurrent evaluation requests.")
    steps_per_eval: int = Field(
        default=25, ge=0, description="Evaluate every this many trainer steps (0 = never during training)."
    )
    max_token_length: int = Field(default=64, ge=8, le=32768, description="Longest sequence (prompt + completion).")
    batch_size: int = Field(default=128, ge=1, le=65536, description="Sequences per trainer step.")
    total_steps: int = Field(default=100, ge=1, le=1_000_000, description="Trainer steps in the run.")
    inference_weight: float = Field(default=1.0, gt=0, description="This environment's share of each batch.")
    max_batches_offpolicy: int = Field(
        default=3, ge=1, le=100, description="Back-pressure: stop sampling when this many batches are queued."
    )
    ensure_scores_are_not_same: bool = Field(
        default=True, description="Drop groups whose scores are all equal (they carry no learning signal)."
    )
    # atroposlib's name and default. A timed-out group is dropped and counted (env/timeouts), not retried.
    worker_timeout: float = Field(
        default=600.0, ge=-1, description="Seconds one collect_trajectories call may take (<= 0: no limit)."
    )
    max_consecutive_failures: int = Field(
        default=20,
        ge=1,
        le=1_000_000,
        description=(
            "End the run when this many groups in a row fail (raise, malformed or timed out); an environment "
            "whose server died ends it at once."
        ),
    )
    include_messages: bool = Field(default=False, description="Send the chat messages with each scored group.")
    use_wandb: bool = Field(default=True, description="Log environment metrics to W&B (offline without a key).")
    wandb_name: str | None = Field(default=None, description="W&B name of the environment's run.")
    seed: int = Field(default=0, ge=0, description="Seed of the item generator.")
    eval_items: int = Field(default=200, ge=1, le=100_000, description="Held-out items per evaluation.")
    temperature: float = Field(default=1.0, ge=0.0, le=10.0, description="Sampling temperature for training.")
    tokenizer_name: str = Field(default=EMBEDDED_BASE_MODEL, description="Follows the base model (locked).")
    rollout_server_url: str = Field(default="http://127.0.0.1:8000", description="Trajectory API (locked).")
    data_path_to_save_groups: str | None = Field(default=None, description="Where groups are written (locked).")


def _objective_choices(schema: dict[str, Any]) -> None:
    """``trainer.loss``'s choices in the JSON schema (the config form's and edits' enum), read when it is made."""
    schema["enum"] = list(objective_names())


class TrainerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    backend: BackendName = Field(default="local", description="local: torch here; tinker: a Tinker API server.")
    base_model: str = Field(
        default=EMBEDDED_BASE_MODEL,
        description=(
            "'embedded' (the tiny model shipped with hermes-nb), 'embedded-chat' (the shipped chat model for agent "
            "environments), a local model directory, a hub id (org/name or org/name@revision, downloaded once "
            "into the hub cache), or a Tinker model."
        ),
    )
    learning_rate: float = Field(default=4e-5, gt=0, le=1.0, description="Adam learning rate.")
    lora_rank: int = Field(default=0, ge=0, le=1024, description="LoRA rank; 0 = full fine-tune (local backend).")
    # An objective's name in hermes_nb.objectives' table (checked below, listed as the schema's choices): one
    # registered from outside is a choice too.
    loss: str = Field(
        default="importance_sampling",
        description="Policy-gradient objective, by Tinker's names: "
        + ", ".join(f"{o.name} ({o.summary})" for o in OBJECTIVES.values())
        + ".",
        json_schema_extra=_objective_choices,
    )
    loss_type: LossAggregation = Field(
        default="dapo",
        description=(
            "How token losses are averaged (TRL's names): dapo = token-mean over the batch (DAPO; the default), "
            "bnpo = the same here (one local batch per step), grpo = mean per sequence, then over sequences "
            "(DeepSeekMath GRPO), dr_grpo = sum over the batch / (sequences x max completion length) (Dr. GRPO)."
        ),
    )
    importance_sampling_level: ImportanceSamplingLevel = Field(
        default="token",
        description="token: one importance ratio per token; sequence: the length-normalised ratio of the whole "
        "completion, shared by its tokens (GSPO).",
    )
    epsilon: float = Field(default=0.2, gt=0, lt=1, description="Lower clip range of ppo: ratio >= 1 - epsilon.")
    epsilon_high: float | None = Field(
        default=None,
        gt=0,
        description="Upper clip range of ppo, ratio <= 1 + epsilon_high (DAPO's clip-higher: 0.28); cispo's cap on "
        f"the importance weight (ScaleRL: {CISPO.default_epsilon_high}). None: epsilon (ppo), "
        f"{CISPO.default_epsilon_high} (cispo).",
    )
    scale_rewards: RewardScaling = Field(
        default="group",
        description="Advantage = (score - group mean) / std of the group (group, GRPO), of the batch (batch), or "
        "not divided (none, Dr. GRPO).",
    )
    num_iterations: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Optimizer steps per batch (GRPO's mu); every pass takes its ratio against the sampling policy.",
    )
    mask_truncated_completions: bool = Field(
        default=False,
        description="Leave completions cut off at max_token_length out of the loss (DAPO's overlong filtering).",
    )
    dynamic_sampling: bool = Field(
        default=False,
        description="Fill every batch with groups that carry a learning signal, pulling more when groups without "
        "one are dropped (DAPO's dynamic sampling); dropped groups are counted in train/groups_dropped.",
    )
    beta: float = Field(
        default=0.0,
        ge=0,
        le=100,
        description="KL penalty coefficient against a frozen reference policy (0 = none; DeepSeek-R1 used 0.001).",
    )
    kl_estimator: KLEstimator = Field(
        default="k3",
        description="Per-token KL estimator (Schulman): k1 = log(p/ref), k2 = (log(p/ref))^2 / 2, "
        "k3 = ref/p - log(ref/p) - 1 (non-negative; GRPO's).",
    )
    reference_model: str | None = Field(
        default=None,
        description="The frozen reference of the KL penalty: a run id, a checkpoint path, a model directory or a hub "
        "id (org/name). "
        "None: the weights the run starts from (a LoRA run: its base with the adapters off, no second copy).",
    )
    teacher_model: str | None = Field(
        default=None,
        description="On-policy distillation: the teacher that scores every sampled token (a run id, '<run id>@best', "
        "a checkpoint path, a model directory or a hub id; same tokenizer as base_model). None: no teacher.",
    )
    teacher_kl_coef: float = Field(
        default=1.0,
        ge=0,
        le=100,
        description="With teacher_model: each sampled token's advantage gets - coef * (log p_student - log p_teacher), "
        "on top of the reward's advantage (tinker-cookbook's recipe).",
    )
    lr_scheduler_type: LRSchedule = Field(
        default="constant",
        description="Learning-rate schedule over the run's steps, after warmup (transformers.get_scheduler's).",
    )
    warmup_steps: int = Field(default=0, ge=0, description="Steps of linear warmup from 0 to learning_rate.")
    importance_sampling_cap: float | None = Field(
        default=None,
        gt=1,
        description="Correct the sampler/trainer mismatch: weight each token by min(p_trainer / p_sampler, cap) "
        "(truncated importance sampling; TRL's vllm_importance_sampling_cap, typically 2-3). None: off.",
    )
    max_grad_norm: float = Field(default=1.0, ge=0, description="Gradient clipping (0 = off).")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay.")
    save_checkpoint_interval: int = Field(
        default=25, ge=0, description="Checkpoint every this many steps (0 = only the final one)."
    )
    seed: int = Field(default=0, ge=0, description="Seed of the trainer and the sampler.")
    torch_threads: int | None = Field(default=None, ge=1, le=512, description="torch threads (None = half the cores).")
    # Resolved by hermes_nb.system.devices (the one place "auto" is decided), for the trainer and its sampler.
    device: str = Field(
        default="auto",
        description="Where the local backend trains and samples: auto (CUDA when available), cpu, cuda or cuda:N.",
    )
    dtype: DTypeName = Field(
        default="auto",
        description=(
            "Compute dtype of the local backend's training and sampling: auto (bfloat16 on CUDA, float32 on CPU), "
            "float32, bfloat16 or float16. Trained weights and Adam state stay float32."
        ),
    )
    sampler: SamplerName = Field(
        default="auto",
        description=(
            "What samples the policy (local backend): native (hermes-nb's batched sampler), vllm (vLLM in the "
            "trainer process, run under HERMES_NB_VLLM_PYTHON), or auto (vllm when that Python imports it and the "
            "device is CUDA, else native)."
        ),
    )
    # On one GPU the trainer holds the float32 weights, their gradients and two Adam moments (~4x what vLLM's copy
    # of the weights takes) besides activations: vLLM gets less than half the device by default.
    vllm_gpu_memory_utilization: float = Field(
        default=0.4,
        gt=0,
        le=1,
        description=(
            "vLLM's share of the GPU's memory (its gpu_memory_utilization: weights, activations, KV cache), in "
            "(0, 1]; the trainer uses the rest. Ignored on a CPU, where vLLM reserves a fixed KV cache."
        ),
    )
    vllm_sleep_mode: bool = Field(
        default=False,
        description=(
            "Put vLLM to sleep while the trainer computes a step (its sleep mode, level 1: weights offloaded to CPU "
            "memory, KV cache freed) and wake it to sample: more GPU memory for training, no sampling during a "
            "step. CUDA only (vLLM's CPU build refuses sleep mode)."
        ),
    )
    gradient_checkpointing: bool = Field(
        default=False,
        description="Recompute activations in the backward pass: less memory, more compute (local backend).",
    )
    ignore_memory_estimate: bool = Field(
        default=False,
        description="Start even when the pre-run estimate (rl_estimate_run) says the run does not fit in memory.",
    )
    pretrained_model_path: str | None = Field(
        default=None,
        description="Start from these weights: a run id, a checkpoint path, a model directory or a hub id (org/name).",
    )
    resume_from: str | None = Field(default=None, description="Continue this stopped or failed run (run id).")
    transfer_learning: bool = Field(default=False, description="Mix a previous run's trajectories into training.")
    replay_from: str | None = Field(default=None, description="Run id whose recorded trajectories are replayed.")
    transfer_weight: float = Field(default=0.0, ge=0, le=1, description="Fraction of each batch from the replay.")
    fine_tune_steps: int = Field(default=0, ge=0, description="Steps during which the replay is mixed in.")
    # Not infrastructure in the locked sense: the user chooses which API to train from; the run still resolves
    # infra.api_url from it (hermes_nb.runs.supervision.ports). None: the run starts its own API on a free loopback
    # port.
    external_api_url: str | None = Field(
        default=None,
        description=(
            "Train from an already running trajectory API (an atroposlib run-api, or another hermes-nb API), "
            "e.g. http://127.0.0.1:8000, instead of starting one. Empty: the run starts its own."
        ),
    )
    start_environment: bool = Field(
        default=True,
        description=(
            "Start the selected environment with the run. false: only environments started elsewhere feed the "
            "external API (needs external_api_url); the selected environment's config still sets the run's shape."
        ),
    )
    # One batch above the environments' default env.max_batches_offpolicy (3, hermes-nb's and atroposlib's):
    # that batch is the room for groups still in flight when an environment stops sampling, so a default
    # environment is paced by its own back-pressure and never refused. More only holds memory while the
    # trainer is stalled; fewer makes this cap the back-pressure (hermes-nb environments wait within it).
    max_queued_batches: int = Field(
        default=4,
        ge=1,
        le=1000,
        description=(
            "Cap of the run's trajectory API queue, in batches of sequences: environments wait at it and posts "
            "beyond it are refused (retry later), so a stalled trainer cannot grow the queue without bound."
        ),
    )

    @field_validator("device")
    @classmethod
    def _device_syntax(cls, value: str) -> str:
        problem = device_syntax_problem(value.strip())
        if problem is not None:
            raise ValueError(problem)
        return value.strip()

    @model_validator(mode="after")
    def _fields_that_go_together(self) -> TrainerConfig:
        problem = trainer_combination_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        # pydantic runs the check above after it has stored an assigned value: a refused one must not stay.
        before = self.__dict__.get(name)
        try:
            super().__setattr__(name, value)
        except ValidationError:
            self.__dict__[name] = before
            raise

    @field_validator("loss")
    @classmethod
    def _registered_objective(cls, value: str) -> str:
        if value not in OBJECTIVES:
            raise ValueError(f"{value!r} is not an objective; expected one of {', '.join(OBJECTIVES)}")
        return value

    @field_validator("external_api_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        url = value.strip().rstrip("/")
        scheme, sep, rest = url.partition("://")
        if scheme not in ("http", "https") or not sep or not rest or any(c.isspace() for c in rest):
            raise ValueError(f"expected an http(s) URL such as http://127.0.0.1:8000, got {value!r}")
        return url


def trainer_combination_problem(trainer: TrainerConfig) -> str | None:
    """Why two trainer fields that are each valid mean nothing together, naming both; None when they fit."""
    if trainer.epsilon_high is not None and OBJECTIVES[trainer.loss].clips is None:
        clipping = " or ".join(name for name, o in OBJECTIVES.items() if o.clips is not None)
        return (
            f"trainer.epsilon_high is a clip range, and trainer.loss: {trainer.loss} does not clip: "
            f"use loss {clipping}, or leave epsilon_high unset"
        )
    if trainer.reference_model is not None and trainer.beta == 0:
        return "trainer.reference_model is the reference of the KL penalty, and trainer.beta is 0: set beta > 0"
    if trainer.vllm_sleep_mode and trainer.sampler == "native":
        return (
            "trainer.vllm_sleep_mode puts vLLM to sleep during a step, and trainer.sampler: native does not run vLLM: "
            "set sampler to vllm or auto, or leave vllm_sleep_mode false"
        )
    if trainer.vllm_sleep_mode and trainer.device == "cpu":
        return (
            "trainer.vllm_sleep_mode needs a CUDA device (vLLM's CPU build refuses sleep mode), and trainer.device is "
            "cpu: set device to cuda or auto on a GPU, or leave vllm_sleep_mode false"
        )
    return None


class TinkerConfig(BaseModel):
    """Where ``trainer.backend: tinker`` trains: the hosted Tinker service or a self-hosted engine (SkyRL tx).
    The key is never here: it comes from ``TINKER_API_KEY`` (environment or ``.env``), so no config file holds it."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    base_url: str | None = Field(
        default=None,
        description="Tinker API server URL (None = TINKER_BASE_URL, else the tinker SDK's default: hosted Tinker).",
    )
    give_up_after_s: float = Field(
        default=300.0,
        gt=0,
        le=86_400,
        description="Seconds a Tinker call is retried (network errors, 5xx, rate limits) before the run fails.",
    )


class WandbConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    project: str = Field(default="hermes-nb", min_length=1, description="W&B project.")
    run_name: str | None = Field(default=None, description="W&B run name (default: <environment>-<run id>).")
    mode: WandbMode = Field(default="auto", description="auto: online with WANDB_API_KEY, else offline.")
    entity: str | None = Field(default=None, description="W&B entity (locked: follows the API key).")


class HealthConfig(BaseModel):
    """What the run's health findings (``hermes_nb.health``) do besides being shown."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    stop_on: list[str] = Field(
        default_factory=list,
        description="Health checks whose finding stops the run (gracefully, with a checkpoint): "
        + ", ".join(HEALTH_CHECKS),
    )

    @field_validator("stop_on")
    @classmethod
    def _known_checks(cls, names: list[str]) -> list[str]:
        unknown = [name for name in names if name not in HEALTH_CHECKS]
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: not a health check; one of {', '.join(HEALTH_CHECKS)}")
        return names


class InfraConfig(BaseModel):
    """Decided by the run system when a run starts; every field is locked."""

    model_config = ConfigDict(extra="forbid")

    run_id: str | None = None
    run_dir: str | None = None
    log_dir: str | None = None
    checkpoint_dir: str | None = None
    api_url: str | None = None
    inference_url: str | None = None
    api_port: int | None = None
    inference_port: int | None = None
    tokenizer_name: str | None = None
    # Resolved from trainer.resume_from / pretrained_model_path / replay_from by the launcher
    # (hermes_nb.runs.transfer.resolve) so that the trainer never has to interpret run ids: a checkpoint to resume
    # (weights + optimizer + step), the step it continues after, initial weights only (transfer), the trajectories
    # file to replay, and the reference.
    resume_checkpoint: str | None = None
    start_step: int = 0
    init_weights: str | None = None
    replay_trajectories: str | None = None
    # trainer.reference_model resolved: the model directory of the KL penalty's reference (None: the starting weights).
    reference_weights: str | None = None
    # trainer.teacher_model resolved: the model directory of the distillation's teacher.
    teacher_weights: str | None = None
    # The Python that runs the environment when its framework's is not hermes-nb's own (an atroposlib one:
    # HERMES_NB_ENV_PYTHON), as checked at start (hermes_nb.frameworks).
    env_python: str | None = None
    # The sampler trainer.sampler resolved to, and the Python that runs the trainer (vLLM's venv for vllm; None: the
    # interpreter running hermes-nb), as checked at start (hermes_nb.runs.sampler_choice).
    sampler: Literal["native", "vllm"] = "native"
    trainer_python: str | None = None


class EnvironmentNeeds(BaseModel):
    """Trainer settings an environment needs to work at all (``BaseEnv.trainer_needs``), read with its schema:
    its ``base_model`` is applied when it is selected, and a start refuses a base model that cannot serve it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The model it is written for (an agent environment: a chat model with a tool-calling template); None: any.
    base_model: str | None = None
    # Its episodes send ``tools``: the base model's chat template must render them, or the model never sees them.
    uses_tools: bool = False


class EnvironmentRef(BaseModel):
    """Which environment class a run uses: found by discovery, loaded by file path in the child processes."""

    model_config = ConfigDict(extra="forbid")

    name: str
    class_name: str
    file: str
    framework: EnvFramework = DEFAULT_FRAMEWORK
    needs: EnvironmentNeeds = Field(default_factory=EnvironmentNeeds)


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    environment: EnvironmentRef | None = None
    env: dict[str, Any] = Field(default_factory=dict)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    wandb: WandbConfig = Field(default_factory=WandbConfig)
    tinker: TinkerConfig = Field(default_factory=TinkerConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    infra: InfraConfig = Field(default_factory=InfraConfig)

    def env_value(self, name: str) -> Any:
        """The ``env`` field ``name`` (one every environment has): its value, else ``BaseEnvConfig``'s default."""
        if name in self.env:
            return self.env[name]
        return BaseEnvConfig.model_fields[name].default

    def max_queued_sequences(self) -> int:
        """The cap of the run's trajectory API queue in sequences: ``trainer.max_queued_batches`` batches."""
        return self.trainer.max_queued_batches * int(self.env_value("batch_size"))

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)

    @classmethod
    def from_yaml_text(cls, text: str, source: str = "<text>") -> RunConfig:
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{source}: not valid YAML ({exc})") from None
        if not isinstance(data, dict):
            raise ConfigError(
                f"{source}: expected a mapping of sections (env, trainer, wandb), got {type(data).__name__}"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{source}: {format_validation_error(exc)}") from None

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        return cls.from_yaml_text(path.read_text(encoding="utf-8"), source=str(path))

    def save(self, path: str | Path) -> None:
        """Write atomically: a reader never sees half a config."""
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.to_yaml(), encoding="utf-8")
        tmp.replace(path)


def embedded_model_dir(name: str) -> Path | None:
    """The folder of a model shipped in the package (``embedded``, ``embedded-chat``), None for any other name."""
    if name == EMBEDDED_BASE_MODEL:
        return embedded_base_model_dir()
    if name == EMBEDDED_CHAT_MODEL:
        return embedded_chat_model_dir()
    return None


def base_model_dir(base_model: str) -> Path:
    """The directory a ``trainer.base_model`` value names: ``embedded`` and ``embedded-chat`` are the models
    shipped in the package, anything else a local model directory (whether it holds a model is for the caller to
    check and report)."""
    return embedded_model_dir(base_model) or Path(base_model).expanduser()


# Locked = infrastructure the system decides. Dotted names, as accepted by rl_edit_config.
LOCKED_FIELDS: frozenset[str] = frozenset(
    {f"env.{name}" for name in LOCKED_ENV_FIELDS}
    | {f"infra.{name}" for name in InfraConfig.model_fields}
    | {"wandb.entity", "environment"}
)


def locked_env_values(infra: InfraConfig, base_model: str) -> dict[str, str]:
    """The values of ``LOCKED_ENV_FIELDS`` a run decides, whatever the file or the user said: where the trajectory
    API listens and which tokenizer the trainer uses (its base model). Fields the run has not decided yet (no API
    URL before ports are picked) are left out."""
    locked: dict[str, str] = {}
    if infra.api_url:
        locked["rollout_server_url"] = infra.api_url
    tokenizer = infra.tokenizer_name or base_model
    if tokenizer:
        locked["tokenizer_name"] = tokenizer
    return locked


def format_validation_error(exc: ValidationError) -> str:
    """One line per problem: ``field.path: message (got value)``."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "config"
        got = error.get("input")
        shown = "" if isinstance(got, dict) else f" (got {got!r})"
        parts.append(f"{where}: {error['msg']}{shown}")
    return "; ".join(parts)
