"""A trainer whose start-up fails after its inference server is up leaves no server, port or engine behind."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from hermes_nb.backends import PARTS
from hermes_nb.config import RunConfig
from hermes_nb.errors import HermesNBError
from hermes_nb.inference.engine import InferenceEngine
from hermes_nb.system.net import LOOPBACK, free_port
from hermes_nb.testing import make_tiny_model
from hermes_nb.trainer.run.main import run

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def closed_engines(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[InferenceEngine]]:
    """The engines whose ``close`` was called (which stops their sampler thread pool)."""
    closed: list[InferenceEngine] = []
    close = InferenceEngine.close

    def recording_close(self: InferenceEngine) -> None:
        closed.append(self)
        close(self)

    monkeypatch.setattr(InferenceEngine, "close", recording_close)
    yield closed


def _config(base_model: str, port: int, api_url: str | None) -> RunConfig:
    config = RunConfig.model_validate({"trainer": {"base_model": base_model, "torch_threads": 1}})
    infra = config.infra.model_copy(update={"inference_port": port, "api_url": api_url})
    return config.model_copy(update={"infra": infra})


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((LOOPBACK, port)) == 0


def _server_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "inference-server" and t.is_alive()]


def test_a_model_that_fails_to_load_stops_the_server_and_the_engine(
    tmp_path: Path, closed_engines: list[InferenceEngine]
) -> None:
    port = free_port()

    with pytest.raises(HermesNBError, match="trainer.base_model"):
        run(_config(str(tmp_path / "no_model_here"), port, "http://127.0.0.1:9"), tmp_path, threading.Event(), PARTS)

    assert not _listening(port)
    assert _server_threads() == []
    assert closed_engines  # the engine was closed


def test_a_config_refused_after_the_model_loaded_stops_the_server_and_the_engine(
    model_dir: Path, tmp_path: Path, closed_engines: list[InferenceEngine]
) -> None:
    port = free_port()

    with pytest.raises(HermesNBError, match="infra.api_url"):
        run(_config(str(model_dir), port, None), tmp_path, threading.Event(), PARTS)

    assert not _listening(port)
    assert _server_threads() == []
    assert closed_engines  # the engine was closed
