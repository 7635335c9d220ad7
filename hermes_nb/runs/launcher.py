"""Starting a run: validate everything, lay out the run directory, hand the run to a detached supervisor.

Returns at once with status ``starting``; the supervisor brings the processes up and records progress in
``run.json``. Nothing is spawned unless the whole configuration is valid.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from secrets import choice as secure_choice

from hermes_nb.config import EMBEDDED_CHAT_MODEL, RunConfig, base_model_dir, locked_env_values
from hermes_nb.errors import ConfigError, LaunchError, NoEnvironmentSelectedError
from hermes_nb.frameworks import registry
from hermes_nb.metrics.wandb_names import wandb_run_name
from hermes_nb.protocol.redaction import without_secrets
from hermes_nb.protocol.run_files import RunPaths
from hermes_nb.protocol.run_state import RunState
from hermes_nb.runs.estimate import check_fits
from hermes_nb.runs.sampler_choice import choose_sampler
from hermes_nb.runs.supervision import warm_start
from hermes_nb.runs.supervision.damage import SUPERVISOR_MODULE
from hermes_nb.runs.supervision.external_trajectory_api import unusable_reason
from hermes_nb.runs.supervision.ports import pick_ports, with_ports
from hermes_nb.runs.supervision.state_file import write_run_state
from hermes_nb.runs.transfer.resolve import resolve_transfer
from hermes_nb.system import home, secrets
from hermes_nb.system.devices import check_device
from hermes_nb.system.home import run_paths
from hermes_nb.system.hub import hub_snapshots
from hermes_nb.system.processes import spawn_group
from hermes_nb.trainer.backend import model_dir_for
from hermes_nb.trainer.local.model_support import check_base_model

# The intermediate launcher process forks the supervisor (or a sweep's driver) and exits; it never takes long.
SUPERVISOR_DETACH_TIMEOUT = 30.0
# Run ids: sortable by creation time, unguessable, and safe as a file name on every platform. 10 characters of a
# 32-letter alphabet = 50 bits: not guessable, still short enough to type.
_ID_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"
_ID_RANDOM_CHARS = 10


def new_run_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    suffix = "".join(secure_choice(_ID_ALPHABET) for _ in range(_ID_RANDOM_CHARS))
    return f"{stamp}-{suffix}"


def validate_for_start(config: RunConfig) -> None:
    if config.environment is None:
        raise NoEnvironmentSelectedError(
            "no environment selected: call rl_select_environment(name) first (see rl_list_environments())"
        )
    if not Path(config.environment.file).is_file():
        raise ConfigError(f"environment file {config.environment.file} no longer exists; select an environment again")
    if warm_start.enabled():
        warm_start.kits_held()  # a HERMES_NB_WARM_KITS it cannot hold: refused before the run is made
    if config.trainer.backend == "local":
        check_base_model(model_dir_for(config.trainer.base_model), config.trainer.base_model)
        check_device(config.trainer.device)  # a CUDA device this machine lacks (imports torch only for cuda)
        check_tools_rendered(config)
        check_fits(config)  # a run that cannot fit in memory: refused here, not by the OOM killer
    choose_sampler(config)  # a vLLM the run needs and its Python cannot import: refused here
    if config.trainer.backend == "tinker":
        from hermes_nb.tinker.preflight import check_before_start

        check_before_start(config)  # key, server, base model: refused here, before anything is created
    validate_framework(config)


# A tool the base model's chat template is asked to render: its name in the text shows the template writes tools.
_PROBE_TOOL = {"type": "function", "function": {"name": "hermes_nb_probe_tool", "description": "", "parameters": {}}}


def check_tools_rendered(config: RunConfig) -> None:
    """An environment that sends tools (``EnvironmentNeeds.uses_tools``) needs a base model whose chat template
    renders them: with any other, every episode would fail at the inference server (HTTP 400) once it runs."""
    ref = config.environment
    if ref is None or not ref.needs.uses_tools:
        return
    from hermes_nb.env.chat_render import ChatRenderer, ChatTemplateError

    model = config.trainer.base_model
    try:
        renderer = ChatRenderer.from_model_dir(base_model_dir(model))
        text = renderer.render([{"role": "user", "content": "?"}], tools=[_PROBE_TOOL], add_generation_prompt=True)
        rendered = "hermes_nb_probe_tool" in text
    except ChatTemplateError:
        rendered = False
    if not rendered:
        suggested = ref.needs.base_model or EMBEDDED_CHAT_MODEL
        raise ConfigError(
            f"trainer.base_model: the chat template of {model!r} does not render tools, which {ref.name} gives the "
            f"model; set trainer.base_model to {suggested!r} (a chat model whose template renders them)"
        )


def validate_framework(config: RunConfig) -> None:
    """What the environment's framework needs: sizes it can run with, and (when this run starts the
    environment) an interpreter that can run it (``FrameworkAdapter.python`` raises naming it otherwise)."""
    assert config.environment is not None
    adapter = registry.adapter(config.environment.framework)
    adapter.check_startable(config)
    if config.trainer.start_environment:
        adapter.check_source(config)
        adapter.python(config.environment.file)


def validate_trajectory_api(config: RunConfig) -> None:
    """An external API (``trainer.external_api_url``) must answer and be able to serve this run's shape from its
    start step (``hermes_nb.runs.supervision.external_trajectory_api``), so a wrong URL fails here, before anything
    is created."""
    trainer = config.trainer
    if not trainer.start_environment and trainer.external_api_url is None:
        raise ConfigError(
            "trainer.start_environment: false needs trainer.external_api_url (environments started elsewhere feed "
            "that API); set it, or set start_environment back to true"
        )
    reason = unusable_reason(config)
    if reason is not None:
        raise ConfigError(reason)


def resolve_infrastructure(config: RunConfig, run_id: str, paths: RunPaths) -> RunConfig:
    """Fill the locked fields: loopback URLs on free ports, directories, tokenizer = base model."""
    config = with_ports(config, *pick_ports())
    base_model = str(base_model_dir(config.trainer.base_model))
    sampler = choose_sampler(config)
    infra = config.infra.model_copy(
        update={
            "run_id": run_id,
            "run_dir": str(paths.run_dir),
            "log_dir": str(home.logs_dir()),
            "checkpoint_dir": str(paths.checkpoints_dir),
            "tokenizer_name": base_model,
            "env_python": _env_python(config),
            "sampler": sampler.sampler,
            "trainer_python": sampler.python,
        }
    )
    env = {**config.env, **locked_env_values(infra, base_model)}
    wandb = config.wandb.model_copy(update={"run_name": wandb_run_name(config, run_id)})
    return config.model_copy(update={"infra": infra, "env": env, "wandb": wandb})


def _env_python(config: RunConfig) -> str | None:
    """The interpreter the environment runs in when its framework's is not hermes-nb's own, as checked by
    ``validate_for_start``."""
    if config.environment is None:
        return None
    return registry.adapter(config.environment.framework).configured_python()


def save_redacted(config: RunConfig, path: Path) -> None:
    """Write config.yaml with any key value that slipped into a field replaced, so no secret lands on disk."""
    text = without_secrets(config.to_yaml(), home.secret_values())
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def initial_state(config: RunConfig, run_id: str) -> RunState:
    assert config.environment is not None
    return RunState(
        run_id=run_id,
        environment=config.environment.name,
        # Progress is step / total_steps: an environment that allows 0 steps still must not divide by zero.
        total_steps=int(config.env_value("total_steps")) or 1,
        api_port=config.infra.api_port,
        inference_port=config.infra.inference_port,
        wandb_project=config.wandb.project,
        wandb_run_name=config.wandb.run_name,
        resumed_from=config.trainer.resume_from,
    )


def spawn_supervisor(paths: RunPaths) -> None:
    spawn_detached("supervisor", SUPERVISOR_MODULE, paths.run_id, paths.logs["supervisor"])


def spawn_detached(what: str, module: str, key: str, log_path: Path) -> None:
    """``python -m MODULE --detach KEY``, which forks again and outlives the process that asked (the kernel)."""
    proc = spawn_group([sys.executable, "-m", module, "--detach", key], log_path, die_with_parent=False)
    try:
        code = proc.wait(timeout=SUPERVISOR_DETACH_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise LaunchError(f"{what} did not detach within {SUPERVISOR_DETACH_TIMEOUT:.0f} s (log: {log_path})") from None
    if code != 0:
        raise LaunchError(f"{what} failed to start ({code}); log: {log_path}")


def start_run(config: RunConfig) -> tuple[RunConfig, RunState, RunPaths]:
    """Validate, lay out, and launch. Returns the resolved config, the initial state and the paths."""
    home.load_keys()
    # Hub ids -> snapshot directories, downloaded now: every process of the run reads the directory config.yaml names.
    config = config.model_copy(update={"trainer": config.trainer.model_copy(update=hub_snapshots(config.trainer))})
    validate_for_start(config)
    config = resolve_transfer(config, base_model_dir(config.trainer.base_model))
    validate_trajectory_api(config)  # after resolve_transfer: it sets the step the run starts from
    run_id = new_run_id()
    paths = run_paths(run_id)
    # Private from here on (0700 folders, a 0600 secret): loopback and /tmp are shared with every local user.
    secrets.private_home()
    paths.run_dir.mkdir(mode=secrets.PRIVATE_DIR_MODE, exist_ok=False)
    secrets.private_dir(paths.run_dir)
    secrets.create_run_secret(paths.run_dir)
    paths.checkpoints_dir.mkdir()
    resolved = resolve_infrastructure(config, run_id, paths)
    save_redacted(resolved, paths.config)
    state = initial_state(resolved, run_id)
    write_run_state(paths.run_dir, state)
    if not warm_start.hand_over(paths):
        spawn_supervisor(paths)
    warm_start.prepare_next(paths)
    return resolved, state, paths
