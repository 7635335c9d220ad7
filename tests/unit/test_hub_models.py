"""Hub ids in the model fields (``org/name``, ``org/name@revision``): resolved once, before a run starts, to a
snapshot in the standard hub cache; refused in one line naming the id when that cannot be done.

No network: a cache laid out as huggingface_hub documents it, and a loopback stand-in for the hub's HTTP API
(tests/hub_standin.py) that records the requests the resolver sends.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

# Before a test sets HF_HUB_OFFLINE: huggingface_hub reads it once, when its constants are first imported.
import huggingface_hub.constants  # noqa: F401
import pytest
from hub_standin import COMMIT, stand_in_hub, write_hub_cache

from hermes_nb import api
from hermes_nb.config import TrainerConfig
from hermes_nb.errors import ConfigError
from hermes_nb.system import home
from hermes_nb.system.hub import HubId, hub_snapshots, parse_hub_id

MODEL_FILES = {"config.json": b'{"model_type": "llama"}', "tokenizer.json": b"{}", "model.safetensors": b"w" * 64}
# What a hub repository also holds and a run does not need.
OTHER_FILES = {"README.md": b"# card", "pytorch_model.bin": b"old weights", "onnx/model.onnx": b"onnx"}
TOKEN = "hf_standin_token_0123456789"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("HF_HOME", "HF_ENDPOINT", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


@pytest.fixture
def model_files(tmp_path: Path) -> Path:
    source = tmp_path / "model"
    source.mkdir()
    for name, body in MODEL_FILES.items():
        (source / name).write_bytes(body)
    return source


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Qwen/Qwen3-0.6B", HubId("Qwen/Qwen3-0.6B", None)),
        ("org/name@v1.0", HubId("org/name", "v1.0")),
        (f"org/name@{COMMIT}", HubId("org/name", COMMIT)),
        ("embedded", None),
        ("embedded-chat", None),
        ("/models/org/name", None),
        ("./org/name", None),
        ("~/org/name", None),
        ("20250102-090000-hjkmnpqrst@best", None),
        ("org/name/extra", None),
    ],
)
def test_a_hub_id_is_an_org_name_value(value: str, expected: HubId | None) -> None:
    assert parse_hub_id(value) == expected


def test_an_existing_directory_of_that_shape_stays_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "models" / "mine").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert parse_hub_id("models/mine") is None


def test_an_offline_cached_id_resolves_to_its_snapshot_for_every_model_field(
    cache: Path, model_files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot = write_hub_cache(cache, "org/tiny", model_files)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    trainer = TrainerConfig(base_model="org/tiny", reference_model="org/tiny@main", beta=0.1)
    resolved = hub_snapshots(trainer)
    assert resolved == {"base_model": str(snapshot), "reference_model": str(snapshot)}


def test_hf_home_places_the_cache_when_hf_hub_cache_is_unset(
    tmp_path: Path, model_files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = write_hub_cache(tmp_path / "hf" / "hub", "org/tiny", model_files)
    assert hub_snapshots(TrainerConfig(base_model="org/tiny")) == {"base_model": str(snapshot)}


def test_an_uncached_id_offline_is_refused_naming_it(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match=r"trainer.base_model: 'org/absent' is not in the hub cache") as caught:
        hub_snapshots(TrainerConfig(base_model="org/absent"))
    assert "HF_HUB_OFFLINE" in str(caught.value) and "\n" not in str(caught.value)


def test_a_tinker_run_names_server_models_which_are_not_downloaded(cache: Path) -> None:
    assert hub_snapshots(TrainerConfig(backend="tinker", base_model="Qwen/Qwen3-8B")) == {}


def test_the_download_asks_for_the_revision_and_only_the_model_files(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    with stand_in_hub({"org/tiny": {**MODEL_FILES, **OTHER_FILES}}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        resolved = hub_snapshots(TrainerConfig(base_model="org/tiny@v2"))
    snapshot = cache / "models--org--tiny" / "snapshots" / COMMIT
    assert resolved == {"base_model": str(snapshot)}
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(MODEL_FILES)
    assert (cache / "models--org--tiny" / "refs" / "v2").read_text(encoding="utf-8") == COMMIT
    paths = [r.path for r in hub.model_requests()]
    assert paths[0] == "/api/models/org/tiny/revision/v2"
    fetched = {p.rsplit("/", 1)[1] for p in paths if "/resolve/" in p}
    assert fetched == set(MODEL_FILES)
    assert f"Fetching {len(MODEL_FILES)} files" in capfd.readouterr().err  # huggingface_hub's progress bar


def test_the_token_from_the_hermes_env_file_goes_in_the_header_and_nowhere_else(
    cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    (home.home_dir() / ".env").parent.mkdir(parents=True, exist_ok=True)
    (home.home_dir() / ".env").write_text(f"HF_TOKEN={TOKEN}\n", encoding="utf-8")
    caplog.set_level(logging.DEBUG)
    with stand_in_hub({"org/private": MODEL_FILES}, gated={"org/private"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert "HF_TOKEN" in home.load_keys()
        monkeypatch.setenv("HF_TOKEN", TOKEN)  # monkeypatch owns it now, and removes it after the test
        hub_snapshots(TrainerConfig(base_model="org/private"))
    assert {r.authorization for r in hub.model_requests()} == {f"Bearer {TOKEN}"}
    out, err = capfd.readouterr()
    assert TOKEN not in out + err + caplog.text
    assert TOKEN in home.secret_values()  # so the run's logs and config.yaml redact it


def test_a_misspelt_id_is_refused_naming_it(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with stand_in_hub({"org/tiny": MODEL_FILES}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(ConfigError, match=r"trainer.base_model: 'org/tinyy' is neither a local directory nor a"):
            hub_snapshots(TrainerConfig(base_model="org/tinyy"))


def test_a_gated_id_without_a_token_is_refused_saying_where_the_token_goes(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with stand_in_hub({"org/gated": MODEL_FILES}, gated={"org/gated"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(ConfigError, match=r"'org/gated' is gated on the hub.*HF_TOKEN=<your token> in ~/.hermes"):
            hub_snapshots(TrainerConfig(base_model="org/gated"))


@pytest.mark.parametrize("model", ["org/absent", "org/absent@main"])
def test_a_start_with_an_uncached_id_offline_is_refused_before_anything_is_created(
    cache: Path, monkeypatch: pytest.MonkeyPatch, model: str
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    asyncio.run(api.rl_select_environment("arithmetic"))
    with pytest.raises(ConfigError, match=f"trainer.base_model: '{model}' is not in the hub cache"):
        asyncio.run(api.rl_start_training(**{"trainer.base_model": model}))
    assert not home.runs_dir().exists() or not any(home.runs_dir().iterdir())


def test_a_start_with_a_misspelt_id_is_refused_before_anything_is_created(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(api.rl_select_environment("arithmetic"))
    with stand_in_hub({"org/tiny": MODEL_FILES}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(ConfigError, match="trainer.base_model: 'org/tinyy' is neither a local directory nor a"):
            asyncio.run(api.rl_start_training(**{"trainer.base_model": "org/tinyy"}))
    assert not home.runs_dir().exists() or not any(home.runs_dir().iterdir())
