"""Every process reads a run's files, its defaults and its base model the same way: each is decided in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_nb.config import (
    EMBEDDED_BASE_MODEL,
    BaseEnvConfig,
    EnvironmentRef,
    RunConfig,
    TrainerConfig,
    base_model_dir,
)
from hermes_nb.errors import ConfigError
from hermes_nb.model_test.targets import resolve_targets
from hermes_nb.protocol.run_files import LOGGED_PROCESSES, PROCESS_NAMES
from hermes_nb.runs.launcher import initial_state, resolve_infrastructure, validate_for_start
from hermes_nb.system import home
from hermes_nb.system.home import run_paths
from hermes_nb.trainer.backend import model_dir_for
from hermes_nb.trainer.run.checkpoints import checkpoint_root
from hermes_nb.trainer.run.loop import LoopSettings
from hermes_nb.trainer.run.registration import registration_for

RUN_ID = "20260101-000000-aaaaaaaaaa"
ENVIRONMENT = EnvironmentRef(
    name="arithmetic", class_name="ArithmeticEnv", file=str(home.shipped_environments_dir() / "arithmetic.py")
)


def test_every_process_of_a_run_and_its_supervisor_has_a_log_in_the_logs_folder() -> None:
    logs = run_paths(RUN_ID).logs
    assert set(logs) == {*PROCESS_NAMES, "supervisor"} == set(LOGGED_PROCESSES)
    assert {path.parent for path in logs.values()} == {home.logs_dir()}
    assert len({path.name for path in logs.values()}) == len(logs)
    assert all(RUN_ID in path.name for path in logs.values())


def test_the_trainer_writes_checkpoints_where_the_readers_look() -> None:
    paths = run_paths(RUN_ID)
    config = RunConfig(environment=ENVIRONMENT)
    settings = LoopSettings.from_config(config, paths.run_dir)
    assert checkpoint_root(config, paths.run_dir) == paths.checkpoints_dir
    assert registration_for(settings, config, 0).checkpoint_dir == str(paths.checkpoints_dir)


def test_env_fields_left_out_take_the_env_config_defaults_in_the_trainer() -> None:
    settings = LoopSettings.from_config(RunConfig(environment=ENVIRONMENT), Path("run"))
    defaults = BaseEnvConfig()
    assert (settings.batch_size, settings.total_steps, settings.max_token_len) == (
        defaults.batch_size,
        defaults.total_steps,
        defaults.max_token_length,
    )


def test_the_launcher_and_the_trainer_agree_on_the_steps_of_a_run_whose_env_leaves_them_out() -> None:
    config = RunConfig(environment=ENVIRONMENT)
    assert initial_state(config, RUN_ID).total_steps == LoopSettings.from_config(config, Path("run")).total_steps


def test_embedded_names_the_shipped_model_for_the_launcher_the_trainer_and_the_model_test() -> None:
    shipped = home.embedded_base_model_dir()
    config = RunConfig(environment=ENVIRONMENT)
    assert config.trainer.base_model == EMBEDDED_BASE_MODEL
    assert base_model_dir(EMBEDDED_BASE_MODEL) == shipped
    assert model_dir_for(config.trainer.base_model) == shipped
    resolved = resolve_infrastructure(config, RUN_ID, run_paths(RUN_ID))
    assert resolved.infra.tokenizer_name == resolved.env["tokenizer_name"] == str(shipped)
    assert [Path(t.location) for t in resolve_targets(None, config)] == [shipped]


def test_a_base_model_under_the_home_directory_is_expanded() -> None:
    assert base_model_dir("~/models/tiny") == Path.home() / "models" / "tiny"


def test_a_base_model_directory_without_a_model_is_refused_before_a_run_starts(tmp_path: Path) -> None:
    config = RunConfig(environment=ENVIRONMENT, trainer=TrainerConfig(base_model=str(tmp_path)))
    with pytest.raises(ConfigError, match=r"trainer.base_model: .* has no config.json"):
        validate_for_start(config)
