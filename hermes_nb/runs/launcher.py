"""Starting a run: validate everything, lay out the run directory, hand the run to a detached supervisor.

Returns at once with status ``starting``; the supervisor brings the processes up and records progress in
``run.json``. Nothing is spawned unless the whole configuration is valid.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hermes_nb import home
from hermes_nb.config import EMBEDDED_BASE_MODEL, RunConfig
from hermes_nb.errors import ConfigError, LaunchError, NoEnvironmentSelectedError
from hermes_nb.net import LOOPBACK, free_port
from hermes_nb.runs.ids import new_run_id
from hermes_nb.runs.layout import RunPaths
from hermes_nb.runs.state import RunState, write_run_state
from hermes_nb.runs.transfer import resolve_transfer
from hermes_nb.runs.wandb_names import wandb_run_name

# The intermediate launcher process forks the supervisor and exits; it never takes long.
SUPERVISOR_DETACH_TIMEOUT = 30.0


def resolve_base_model(base_model: str) -> str:
    if base_model == EMBEDDED_BASE_MODEL:
        return str(home.embedded_base_model_dir())
    return base_model


def validate_for_start(config: RunConfig) -> None:
    if config.environment is None:
        raise NoEnvironmentSelectedError(
            "no environment selected: call rl_select_environment(name) first (see rl_list_environments())"
        )
    if not Path(config.environment.file).is_file():
        raise ConfigError(f"environment file {config.environment.file} no longer exists; select an environment again")
    if config.trainer.backend == "local":
        model_dir = Path(resolve_base_model(config.trainer.base_model)).expanduser()
        if not (model_dir / "config.json").is_file():
            raise ConfigError(
                f"trainer.base_model: {config.trainer.base_model!r} is not a model directory (no config.json); "
                "use 'embedded' or a local Hugging Face model directory"
            )


def resolve_infrastructure(config: RunConfig, run_id: str, paths: RunPaths) -> RunConfig:
    """Fill the locked fields: loopback URLs on free ports, directories, tokenizer = base model."""
    api_port, inference_port = free_port(), free_port()
    while inference_port == api_port:
        inference_port = free_port()
    api_url = f"http://{LOOPBACK}:{api_port}"
    inference_url = f"http://{LOOPBACK}:{inference_port}"
    base_model = resolve_base_model(config.trainer.base_model)
    infra = config.infra.model_copy(
        update={
            "run_id": run_id,
            "run_dir": str(paths.run_dir),
            "log_dir": str(home.logs_dir()),
            "checkpoint_dir": str(paths.checkpoints_dir),
            "api_url": api_url,
            "inference_url": inference_url,
            "api_port": api_port,
            "inference_port": inference_port,
            "tokenizer_name": base_model,
        }
    )
    env = {**config.env, "rollout_server_url": api_url, "tokenizer_name": base_model}
    wandb = config.wandb.model_copy(update={"run_name": wandb_run_name(config, run_id)})
    return config.model_copy(update={"infra": infra, "env": env, "wandb": wandb})


def save_redacted(config: RunConfig, path: Path) -> None:
    """Write config.yaml with any key value that slipped into a field replaced, so no secret lands on disk."""
    text = config.to_yaml()
    for secret in home.secret_values():
        text = text.replace(secret, "<redacted>")
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def initial_state(config: RunConfig, run_id: str) -> RunState:
    assert config.environment is not None
    return RunState(
        run_id=run_id,
        environment=config.environment.name,
        total_steps=int(config.env.get("total_steps", 0)) or 1,
        api_port=config.infra.api_port,
        inference_port=config.infra.inference_port,
        wandb_project=config.wandb.project,
        wandb_run_name=config.wandb.run_name,
        resumed_from=config.trainer.resume_from,
    )


def spawn_supervisor(paths: RunPaths) -> None:
    log_path = paths.logs["supervisor"]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hermes_nb.runs.supervisor", "--detach", paths.run_id],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        code = proc.wait(timeout=SUPERVISOR_DETACH_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise LaunchError(
            f"supervisor did not detach within {SUPERVISOR_DETACH_TIMEOUT:.0f} s (log: {log_path})"
        ) from None
    if code != 0:
        raise LaunchError(f"supervisor failed to start ({code}); log: {log_path}")


def start_run(config: RunConfig) -> tuple[RunConfig, RunState, RunPaths]:
    """Validate, lay out, and launch. Returns the resolved config, the initial state and the paths."""
    home.load_keys()
    validate_for_start(config)
    config = resolve_transfer(config, Path(resolve_base_model(config.trainer.base_model)))
    run_id = new_run_id()
    paths = RunPaths.for_run(run_id)
    paths.run_dir.mkdir(parents=True, exist_ok=False)
    paths.checkpoints_dir.mkdir()
    home.logs_dir().mkdir(parents=True, exist_ok=True)
    resolved = resolve_infrastructure(config, run_id, paths)
    save_redacted(resolved, paths.config)
    state = initial_state(resolved, run_id)
    write_run_state(paths.run_dir, state)
    spawn_supervisor(paths)
    return resolved, state, paths
