"""Where hermes-nb's files live: the names the supervisor, trainer, environment, kernel and CLI agree on.

A run directory plus its log files are the whole record of a run, and the contract between its processes.
Where ``<home>`` is, ``hermes_nb.system.home`` decides (this module takes it as given)::

    <home>/session.json                 the selected environment and config (kernels, scripts and the CLI)
    <home>/inference_tests/<time>/      the files of one rl_test_inference
    <home>/logs/<process>_<run_id>.log
    <home>/sweeps/<sweep_id>/sweep.json  a sweep: its variants, their runs and its driver (``runs.sweep_dirs``)
    <home>/archive/                     archived runs (``runs/``) and their logs (``logs/``), laid out as above
    <home>/runs/<run_id>/
        secret                          the run's secret, mode 0600 (``hermes_nb.protocol.auth``)
        run.json                        the run's state (``hermes_nb.protocol.run_state``), written by the supervisor
        config.yaml                     the resolved ``RunConfig`` every process of the run starts from
        metrics.jsonl                   the trainer's metric rows (``hermes_nb.protocol.metrics``)
        env_metrics.jsonl               the environment's metric rows
        checkpoints.jsonl               one line per saved checkpoint (``hermes_nb.protocol.checkpoints``)
        checkpoints/step_<N>/           ``from_pretrained`` files, trainer_state.pt and the run's config.yaml
        trajectories.jsonl.gz           the batches the trainer trained on
        atropos_serve.yaml              an atroposlib environment's serve settings (``hermes_nb.frameworks.atroposlib``)
        .disk_reserve                   room freed when the disk is full, while the run is live
        tinker.json                     the Tinker backend's remote side: server, model, tokens, retries
        tinker_weights/                 a Tinker run's final weights, once downloaded
        note.txt                        the user's note on the run (``rl_tag_run``), shown by the runs table
        health.jsonl                    the run's health findings, one per line (``hermes_nb.protocol.health``)
        cost.json                       what the run cost: wall time, CPU, memory, tokens (same module)
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel

SESSION_FILE = "session.json"
RUNS_DIR = "runs"
LOGS_DIR = "logs"
INFERENCE_TESTS_DIR = "inference_tests"
SWEEPS_DIR = "sweeps"
SWEEP_FILE = "sweep.json"
# The config each variant of a sweep runs with (its index in the sweep), beside sweep.json.
SWEEP_VARIANT_CONFIG = "variant_{index}.yaml"
# Where rl_delete_run(..., archive=True) moves a run directory and its logs (same layout, under this folder).
ARCHIVE_DIR = "archive"

RUN_STATE_FILE = "run.json"
CONFIG_FILE = "config.yaml"
# The run's secret (``hermes_nb.system.secrets``): its servers answer only requests that carry it.
RUN_SECRET_FILE = "secret"
# One JSON object per line.
TRAINER_METRICS_FILE = "metrics.jsonl"
ENV_METRICS_FILE = "env_metrics.jsonl"
CHECKPOINTS_FILE = "checkpoints.jsonl"
CHECKPOINTS_DIR = "checkpoints"
TRAJECTORIES_FILE = "trajectories.jsonl.gz"
# Room kept while the run is live, freed when the disk is full so that the failure can still reach run.json
# (``hermes_nb.system.disk.Reserve``).
DISK_RESERVE_FILE = ".disk_reserve"
# Inside each checkpoint directory, beside the ``from_pretrained`` files: optimizer, RNG and step (resume needs it).
TRAINER_STATE_FILE = "trainer_state.pt"
# The settings an atroposlib environment is served with (its CLI's --config YAML: env and openai sections).
ATROPOS_SERVE_FILE = "atropos_serve.yaml"
# The remote side of a run on the Tinker backend (``hermes_nb.protocol.tinker``), rewritten by the trainer each step.
TINKER_FILE = "tinker.json"
# Inside a Tinker checkpoint directory: the ``tinker://`` paths of its state and sampler weights.
TINKER_CHECKPOINT_FILE = "tinker_checkpoint.json"
# Where rl_get_results(..., download=True) puts a Tinker run's final weights (``from_pretrained``-loadable).
TINKER_WEIGHTS_DIR = "tinker_weights"
# The user's note on a run (rl_tag_run): one line of text, written by the kernel, never by the run's processes.
RUN_NOTE_FILE = "note.txt"
# The run's health findings (``hermes_nb.health``), appended by the trainer and the environment as each begins.
HEALTH_FILE = "health.jsonl"
# What the run cost (``hermes_nb.protocol.health.RunCost``), rewritten by the supervisor.
COST_FILE = "cost.json"

# The processes the supervisor starts, in start order; the supervisor itself logs too. "sweep" is a sweep's
# driver (``hermes_nb.runs.sweeps.driver``), recorded in its sweep.json, not in any run's.
ChildProcessName = Literal["api", "trainer", "env"]
ProcessName = Literal["supervisor", "sweep", ChildProcessName]
PROCESS_NAMES: tuple[str, ...] = get_args(ChildProcessName)
LOGGED_PROCESSES: tuple[str, ...] = (*PROCESS_NAMES, "supervisor")


def log_file_name(process: str, run_id: str) -> str:
    return f"{process}_{run_id}.log"


def sweep_log_file_name(sweep_id: str) -> str:
    """The sweep driver's log, beside the runs' logs in ``<home>/logs``."""
    return log_file_name("sweep", sweep_id)


class RunPaths(BaseModel):
    run_id: str
    run_dir: Path
    config: Path
    state: Path
    metrics: Path
    env_metrics: Path
    checkpoints_dir: Path
    checkpoints_index: Path
    trajectories: Path
    health: Path
    cost: Path
    logs: dict[str, Path]

    @classmethod
    def under(cls, home: Path, run_id: str) -> RunPaths:
        """The paths of run ``run_id`` in the home folder ``home`` (``hermes_nb.system.home.run_paths`` finds it)."""
        run_dir = home / RUNS_DIR / run_id
        return cls(
            run_id=run_id,
            run_dir=run_dir,
            config=run_dir / CONFIG_FILE,
            state=run_dir / RUN_STATE_FILE,
            metrics=run_dir / TRAINER_METRICS_FILE,
            env_metrics=run_dir / ENV_METRICS_FILE,
            checkpoints_dir=run_dir / CHECKPOINTS_DIR,
            checkpoints_index=run_dir / CHECKPOINTS_FILE,
            trajectories=run_dir / TRAJECTORIES_FILE,
            health=run_dir / HEALTH_FILE,
            cost=run_dir / COST_FILE,
            logs={name: home / LOGS_DIR / log_file_name(name, run_id) for name in LOGGED_PROCESSES},
        )
