"""atroposlib environments, the parts that need no atroposlib: discovery's mark, the environment Python and its
check, the run's serve settings, and the mapping of atroposlib's metrics onto the run's.

The same paths with the real atroposlib (selection, training, failures, a notebook) are in
tests/e2e/test_atropos_envs.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from IPython.core.interactiveshell import InteractiveShell

from hermes_nb.config import EnvironmentRef, InfraConfig, RunConfig
from hermes_nb.errors import ConfigError, EnvironmentPythonError
from hermes_nb.frameworks import registry
from hermes_nb.frameworks.atroposlib import bridge, interpreter, serve, sizes
from hermes_nb.frameworks.atroposlib.metrics_map import EnvMetricsSink, run_metric_values
from hermes_nb.frameworks.contract import ServeRequest
from hermes_nb.notebook.magics import HermesNB
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.run_files import ATROPOS_SERVE_FILE
from hermes_nb.selection import discovery
from hermes_nb.system.home import run_paths

ATROPOS_ENV = '''
"""Add numbers."""
{imports}


class AddEnv({base}):
    name = "add"
'''


def write(directory: Path, name: str, source: str) -> Path:
    path = directory / name
    path.write_text(source, encoding="utf-8")
    return path


def scanned(directory: Path) -> dict[str, discovery.EnvironmentInfo]:
    discovery.clear_cache()
    environments, errors = discovery.scan([directory])
    assert errors == []
    return {env.name: env for env in environments}


# ---------------------------------------------------------------- discovery


@pytest.mark.parametrize(
    ("imports", "base"),
    [
        ("from atroposlib.envs.base import BaseEnv", "BaseEnv"),
        ("from atroposlib.envs.base import BaseEnv as AtroposEnv", "AtroposEnv"),
        ("import atroposlib.envs.base as b", "b.BaseEnv"),
        ("import atroposlib.envs.base", "atroposlib.envs.base.BaseEnv"),
    ],
)
def test_a_class_deriving_from_atroposlibs_base_env_is_marked_atroposlib(
    tmp_path: Path, imports: str, base: str
) -> None:
    write(tmp_path, "add.py", ATROPOS_ENV.format(imports=imports, base=base))

    assert scanned(tmp_path)["add"].framework == "atroposlib"


def test_the_mark_follows_the_chain_through_a_class_in_another_file(tmp_path: Path) -> None:
    write(tmp_path, "add.py", ATROPOS_ENV.format(imports="from atroposlib.envs.base import BaseEnv", base="BaseEnv"))
    write(tmp_path, "harder.py", 'from add import AddEnv\n\n\nclass HarderEnv(AddEnv):\n    name = "harder"\n')

    found = scanned(tmp_path)

    assert found["harder"].framework == "atroposlib"


def test_a_hermes_nb_environment_is_not_marked(tmp_path: Path) -> None:
    write(tmp_path, "add.py", ATROPOS_ENV.format(imports="from hermes_nb.env import BaseEnv", base="BaseEnv"))

    assert scanned(tmp_path)["add"].framework == "hermes_nb"


# ---------------------------------------------------------------- the environment Python


@pytest.fixture
def fake_atroposlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable package named atroposlib on PYTHONPATH, for the interpreter check (not atroposlib itself)."""
    package = tmp_path / "site" / "atroposlib"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(package.parent))
    return package.parent


def test_the_environment_python_defaults_to_this_interpreter_and_follows_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(interpreter.ENV_PYTHON_VAR, raising=False)
    assert interpreter.configured_python() == sys.executable
    monkeypatch.setenv(interpreter.ENV_PYTHON_VAR, "~/venvs/atropos/bin/python")
    assert interpreter.configured_python() == str(Path.home() / "venvs/atropos/bin/python")


def test_a_hermes_nb_environment_runs_in_this_interpreter_whatever_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(interpreter.ENV_PYTHON_VAR, "/nonexistent/python")
    assert registry.adapter("hermes_nb").python("env.py") == sys.executable


def test_an_interpreter_without_atroposlib_is_refused_with_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(interpreter.ENV_PYTHON_VAR, sys.executable)  # hermes-nb's own venv has no atroposlib

    with pytest.raises(EnvironmentPythonError) as raised:
        registry.adapter("atroposlib").python("environments/add.py")

    message = str(raised.value)
    assert "environments/add.py is written against atroposlib" in message
    assert f"{sys.executable} (from {interpreter.ENV_PYTHON_VAR}) cannot import" in message
    assert "pip install atroposlib==0.4.0" in message and "%config HermesNB.env_python" in message
    assert "\n" not in message


def test_a_missing_interpreter_is_refused_naming_the_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(interpreter.ENV_PYTHON_VAR, str(tmp_path / "python"))

    with pytest.raises(
        EnvironmentPythonError, match=f"{tmp_path / 'python'} .from {interpreter.ENV_PYTHON_VAR}. is not"
    ):
        registry.adapter("atroposlib").python("add.py")


def test_an_interpreter_that_imports_atroposlib_is_used(fake_atroposlib: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(interpreter.ENV_PYTHON_VAR, sys.executable)

    assert registry.adapter("atroposlib").python("add.py") == sys.executable
    probe = interpreter.probe_python(sys.executable)
    assert probe.atroposlib == "unknown"  # importable, but installed without package metadata
    assert probe.python_version == ".".join(str(n) for n in sys.version_info[:3])


def atropos_config(tmp_path: Path, **env: object) -> RunConfig:
    values = {"group_size": 4, "batch_size": 16, "total_steps": 6, "use_wandb": True, "max_operand": 4, **env}
    return RunConfig(
        environment=EnvironmentRef(name="add", class_name="AddEnv", file="/envs/add.py", framework="atroposlib"),
        env=values,
        infra=InfraConfig(
            run_dir=str(tmp_path),
            api_url="http://127.0.0.1:4100",
            inference_url="http://127.0.0.1:4200",
            tokenizer_name="/models/tiny",
            env_python="/venvs/atropos/bin/python",
        ),
    )


def test_sizes_left_to_the_trainer_take_the_runs_defaults_at_selection() -> None:
    chosen = sizes.selection_values({"batch_size": -1, "total_steps": -1, "group_size": 8, "steps_per_eval": -1})

    assert chosen == {"batch_size": 128, "total_steps": 100, "group_size": 8, "steps_per_eval": -1}


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"batch_size": -1}, "env.batch_size"),
        ({"total_steps": 0}, "env.total_steps"),
        ({"group_size": 32}, "env.group_size"),
    ],
)
def test_a_start_refuses_sizes_no_run_can_use(tmp_path: Path, env: dict[str, int], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        sizes.check_startable(atropos_config(tmp_path, **env))


def test_serve_settings_lock_the_runs_urls_tokenizer_and_sizes(tmp_path: Path) -> None:
    settings = serve.serve_settings(atropos_config(tmp_path, rollout_server_url="http://localhost:8000"))

    env, server = settings["env"], settings["openai"]
    assert env["rollout_server_url"] == "http://127.0.0.1:4100"
    assert env["tokenizer_name"] == "/models/tiny" and server["tokenizer_name"] == "/models/tiny"
    assert (env["total_steps"], env["batch_size"], env["group_size"], env["max_operand"]) == (6, 16, 4, 4)
    assert env["data_path_to_save_groups"] is None
    assert server["base_url"] == "http://127.0.0.1:4200/v1" and server["server_type"] == "vllm"


def test_serve_settings_leave_unset_fields_to_atroposlib_and_name_an_unnamed_environment(tmp_path: Path) -> None:
    config = atropos_config(tmp_path, wandb_name=None, num_rollouts_to_keep=None)

    env = serve.serve_settings(config)["env"]

    assert "num_rollouts_to_keep" not in env
    assert env["wandb_name"] == config.environment.name  # type: ignore[union-attr]
    assert serve.serve_settings(atropos_config(tmp_path, wandb_name="mine"))["env"]["wandb_name"] == "mine"


@pytest.mark.parametrize(
    ("use_wandb", "mode", "expected"),
    [(True, "offline", "offline"), (True, "disabled", "disabled"), (False, "online", "disabled")],
)
def test_the_environment_logs_to_wandb_only_when_it_wants_to_and_the_run_has_wandb_on(
    tmp_path: Path, use_wandb: bool, mode: str, expected: str
) -> None:
    config = atropos_config(tmp_path, use_wandb=use_wandb)
    config.wandb.mode = mode  # type: ignore[assignment]

    assert serve.serve_settings(config)["env"]["use_wandb"] is (expected != "disabled")
    env = serve.serve_environment(config, {})
    assert env["WANDB_MODE"] == expected
    assert env.get("WANDB_DIR") == (str(tmp_path) if expected != "disabled" else None)


def test_the_serve_command_is_atroposlibs_cli_through_the_bridge_in_the_environment_python(tmp_path: Path) -> None:
    config = atropos_config(tmp_path)
    paths = run_paths("20260101-000000-aaaaaaaaaa").model_copy(update={"run_dir": tmp_path})

    command = registry.adapter("atroposlib").serve(ServeRequest(config=config, paths=paths, base_environment={}))
    command.write_files()
    argv = command.argv

    settings = tmp_path / ATROPOS_SERVE_FILE
    assert argv[:5] == [
        "/venvs/atropos/bin/python",
        "-m",
        "hermes_nb.frameworks.atroposlib.bridge",
        "/envs/add.py",
        "AddEnv",
    ]
    assert argv[argv.index("--") :] == ["--", "serve", "--config", str(settings)]
    assert argv[argv.index("--total-steps") + 1] == "6"
    assert yaml.safe_load(settings.read_text()) == serve.serve_settings(config)


# ---------------------------------------------------------------- metrics


def test_atroposlib_metric_names_become_the_runs_and_non_numbers_are_left_out() -> None:
    table = object()  # a wandb.Table
    values = run_metric_values(
        {
            "train/completion_lengths": 3,
            "train/items_rejected": 2,
            "train/items_sent_to_api": 5,
            "train/percent_correct": 0.5,
            "train/rollouts": table,
            "train/completion_lengths_std": float("nan"),
            "server/latency": 0.25,
        }
    )

    assert values == {
        keys.ENV_COMPLETION_TOKENS_MEAN: 3.0,
        "env/items_rejected": 2.0,
        keys.ENV_REPORTED_PERCENT_CORRECT: 0.5,
        "server/latency": 0.25,
    }


def group(scores: list[float]) -> dict[str, object]:
    return {"tokens": [[1, 2, 3]] * len(scores), "masks": [[-100, 2, 3]] * len(scores), "scores": scores}


def rows(path: Path) -> list[keys.MetricsRow]:
    return [keys.MetricsRow.from_json_line(line) for line in path.read_text().splitlines()]


def test_the_sink_writes_reward_correctness_and_the_groups_fate_of_every_scored_completion(tmp_path: Path) -> None:
    sink = EnvMetricsSink(tmp_path / "env_metrics.jsonl")
    sink.observe_groups([group([1.0, -1.0]), group([-1.0, -1.0]), None])
    sink.observe_posted(1)

    sink.log(3, {})

    [row] = rows(sink.path)
    assert row.step == 3
    assert row.values == {
        keys.ENV_REWARD_MEAN: -0.5,
        keys.ENV_PERCENT_CORRECT: 0.25,
        keys.ENV_GROUPS_POSTED: 1.0,
        keys.ENV_GROUPS_SKIPPED: 1.0,
    }


def test_the_environments_own_percent_correct_is_kept_beside_the_bridges_under_its_own_name(tmp_path: Path) -> None:
    sink = EnvMetricsSink(tmp_path / "env_metrics.jsonl")
    sink.observe_groups([group([1.0, 0.0])])

    values = sink.log(1, {"train/percent_correct": 0.25})

    assert values[keys.ENV_REWARD_MEAN] == values[keys.ENV_PERCENT_CORRECT] == 0.5  # the completions it saw
    assert values[keys.ENV_REPORTED_PERCENT_CORRECT] == 0.25
    assert not any(key.startswith(keys.TRAIN_PREFIX) for key in values)  # the trainer's keys


def test_an_evaluation_is_written_once_at_the_step_it_ran(tmp_path: Path) -> None:
    sink = EnvMetricsSink(tmp_path / "env_metrics.jsonl")

    sink.log_evaluation(2, {"eval/percent_correct": 0.25}, seconds=0.5)
    sink.log(3, {"eval/percent_correct": 0.25, "train/percent_correct": 0.5})

    first, second = rows(sink.path)
    assert (first.step, first.values) == (2, {keys.EVAL_PERCENT_CORRECT: 0.25, keys.EVAL_SECONDS: 0.5})
    assert (second.step, second.values) == (3, {keys.ENV_REPORTED_PERCENT_CORRECT: 0.5})


def test_a_log_with_nothing_to_say_writes_no_row(tmp_path: Path) -> None:
    sink = EnvMetricsSink(tmp_path / "env_metrics.jsonl")

    sink.log(1, {"train/rollouts": object()})

    assert not sink.path.exists()


# ---------------------------------------------------------------- the bridge's end of the run


def fake_env(total_steps: int, group_size: int = 4, batch_size: int = 16) -> SimpleNamespace:
    config = SimpleNamespace(total_steps=total_steps, group_size=group_size, batch_size=batch_size)
    return SimpleNamespace(config=config)


def run_link(tmp_path: Path, total_steps: int) -> bridge.RunLink:
    return bridge.RunLink("http://127.0.0.1:1", total_steps, EnvMetricsSink(tmp_path / "m.jsonl"))


def test_a_loop_that_ends_with_enough_batches_queued_is_not_an_early_exit(tmp_path: Path) -> None:
    # atroposlib ends its loop once step + queued batches pass total_steps: 4 + 8 groups (2 batches) > 5.
    bridge.check_not_early(fake_env(total_steps=6), run_link(tmp_path, 6), {"current_step": 4, "queue_size": 8})


def test_an_environment_that_lowered_its_total_steps_is_an_early_exit_naming_both(tmp_path: Path) -> None:
    with pytest.raises(bridge.EarlyExit, match="at trainer step 2 of 6: its total_steps is 1"):
        bridge.check_not_early(fake_env(total_steps=1), run_link(tmp_path, 6), {"current_step": 2, "queue_size": 0})


def test_a_loop_that_returns_without_the_batches_the_run_needs_is_an_early_exit(tmp_path: Path) -> None:
    with pytest.raises(bridge.EarlyExit, match="returned with 0 batch"):
        bridge.check_not_early(fake_env(total_steps=6), run_link(tmp_path, 6), {"current_step": 2, "queue_size": 3})


def test_the_bridge_splits_its_arguments_from_atroposlibs() -> None:
    args, cli = bridge.parse_args(
        ["add.py", "AddEnv", "--metrics", "m.jsonl", "--api-url", "http://a", "--total-steps", "6", "--", "serve"]
    )

    assert (args.file, args.class_name, args.metrics, args.total_steps) == ("add.py", "AddEnv", "m.jsonl", 6)
    assert cli == ["serve"]


# ---------------------------------------------------------------- %config HermesNB.env_python


@pytest.fixture
def ip(monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.delenv(interpreter.ENV_PYTHON_VAR, raising=False)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "hermes_nb")
    yield shell
    next(c for c in shell.configurables if isinstance(c, HermesNB)).env_python = ""


def test_config_env_python_sets_the_variable_selection_and_runs_read(ip: InteractiveShell, tmp_path: Path) -> None:
    ip.run_line_magic("config", f"HermesNB.env_python = '{tmp_path / 'bin' / 'python'}'")
    assert os.environ[interpreter.ENV_PYTHON_VAR] == str(tmp_path / "bin" / "python")
    assert interpreter.configured_python() == str(tmp_path / "bin" / "python")

    ip.run_line_magic("config", "HermesNB.env_python = ''")
    assert interpreter.ENV_PYTHON_VAR not in os.environ
    assert interpreter.configured_python() == sys.executable


def test_no_key_reaches_the_serve_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret-123")
    config = atropos_config(tmp_path)
    paths = run_paths("20260101-000000-aaaaaaaaaa").model_copy(update={"run_dir": tmp_path})

    command = registry.adapter("atroposlib").serve(ServeRequest(config=config, paths=paths, base_environment={}))
    command.write_files()

    assert "wandb-secret-123" not in json.dumps(command.argv)
    assert "wandb-secret-123" not in (tmp_path / ATROPOS_SERVE_FILE).read_text()


def test_the_modules_the_environment_python_runs_import_only_the_stdlib_pydantic_and_hermes_nb_protocol() -> None:
    # atroposlib's venv has pydantic but not hermes-nb's other dependencies (transformers 5, httpx, torch ...).
    probe = (
        "import sys, json; import hermes_nb.frameworks.atroposlib.bridge; "
        "import hermes_nb.frameworks.atroposlib.model_testing_bridge, hermes_nb.selection.schema_child; "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)

    imported = {name for name in json.loads(done.stdout) if not name.startswith("_")}  # site machinery, __main__
    pydantic = {"pydantic", "pydantic_core", "typing_extensions", "annotated_types", "typing_inspection"}
    assert imported - pydantic == {"hermes_nb"}
