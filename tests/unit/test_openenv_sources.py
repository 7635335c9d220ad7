"""OpenEnv sources that need what this machine lacks are refused before anything is launched, in one line naming
why and what works instead (``env.server_url`` to a server you started): an ``openenv init`` package whose
manifest's runtime is a Docker image, and a Hugging Face Space as the server. The manifest ``openenv init``
writes (``runtime: fastapi``, ``app: server.app:app``: OpenEnv's own ``envs/`` declare the same) is served."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psutil
import pytest
from scaffolds import two_step_openenv
from side_envs import side_env_python

from hermes_nb import api
from hermes_nb.errors import ConfigError
from hermes_nb.frameworks.openenv import sources
from hermes_nb.frameworks.openenv.interpreter import OPENENV_PYTHON_VAR
from hermes_nb.model_test.runner import rl_test_inference
from hermes_nb.system import home

# Selecting reads the episode settings in the OpenEnv Python: its import of openenv is several seconds.
pytestmark = pytest.mark.timeout(120)
SCAFFOLD_RUNTIME = "runtime: fastapi\n"
SPACES = ["openenv/echo-env", "https://huggingface.co/spaces/openenv/echo-env", "https://openenv-echo-env.hf.space"]


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return two_step_openenv(tmp_path_factory.mktemp("openenv_sources"))


@pytest.fixture(scope="module")
def docker_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``openenv init``'s package whose manifest runs it from a Docker image instead of serving its app."""
    package = two_step_openenv(tmp_path_factory.mktemp("docker_source"), "boxed")
    manifest = package / "openenv.yaml"
    text = manifest.read_text(encoding="utf-8")
    assert SCAFFOLD_RUNTIME in text, "openenv init's manifest changed: update the edit"
    manifest.write_text(text.replace(SCAFFOLD_RUNTIME, "runtime: docker\nimage: boxed-env:latest\n"), encoding="utf-8")
    return package


def _environment_file(package: Path) -> str:
    return str(package / "server" / f"{package.name}_environment.py")


def _selected(package: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OPENENV_PYTHON_VAR, str(side_env_python("openenv")))
    monkeypatch.setenv(home.ENV_PATH_VAR, str(package))
    asyncio.run(api.rl_select_environment(package.name))


def _nothing_launched() -> None:
    assert not home.runs_dir().exists() or list(home.runs_dir().iterdir()) == []
    assert psutil.Process().children(recursive=True) == []


def test_the_manifest_openenv_init_writes_is_served(scaffolded: Path) -> None:
    assert sources.refusal(_environment_file(scaffolded), None) is None


def test_a_docker_image_manifest_is_refused_before_a_run_starts_anything(
    docker_package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _selected(docker_package, monkeypatch)

    with pytest.raises(ConfigError) as refused:
        asyncio.run(api.rl_start_training(total_steps=1))

    message = str(refused.value)
    assert "runtime: docker, image: boxed-env:latest" in message and "starts no container" in message
    assert "env.server_url" in message and len(message.splitlines()) == 1
    _nothing_launched()


def test_a_docker_image_manifest_is_refused_before_a_model_test_starts_anything(
    docker_package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _selected(docker_package, monkeypatch)

    with pytest.raises(ConfigError, match="Docker image"):
        asyncio.run(rl_test_inference(num_steps=1, group_size=2, models="embedded-chat"))
    _nothing_launched()


def test_a_docker_image_manifest_with_the_server_you_started_is_not_refused(docker_package: Path) -> None:
    assert sources.refusal(_environment_file(docker_package), "http://127.0.0.1:8000") is None


@pytest.mark.parametrize(
    ("space", "named", "clone"),
    [
        (SPACES[0], "openenv/echo-env", "openenv/echo-env"),
        (SPACES[1], "openenv/echo-env", "openenv/echo-env"),
        (SPACES[2], "openenv-echo-env.hf.space", "OWNER/NAME"),  # the host does not say where the owner ends
    ],
)
def test_a_hugging_face_space_as_the_server_is_refused_naming_it(
    scaffolded: Path, space: str, named: str, clone: str
) -> None:
    why = sources.refusal(_environment_file(scaffolded), space)

    assert why is not None and f"is a Hugging Face Space ({named})" in why
    assert f"git clone https://huggingface.co/spaces/{clone})" in why and "env.server_url" in why


def test_a_hugging_face_space_is_refused_before_a_run_starts_anything(
    scaffolded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _selected(scaffolded, monkeypatch)
    asyncio.run(api.rl_edit_config("env.server_url", SPACES[2]))

    with pytest.raises(ConfigError, match="Hugging Face Space"):
        asyncio.run(api.rl_start_training(total_steps=1))
    _nothing_launched()


@pytest.mark.parametrize("server", ["http://127.0.0.1:8000", "http://localhost:9000/", "https://envs.example.org"])
def test_any_other_server_url_is_not_refused(scaffolded: Path, server: str) -> None:
    assert sources.refusal(_environment_file(scaffolded), server) is None
