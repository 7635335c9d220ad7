"""The framework registry: shipped adapters, adapters registered from outside, and the errors for a wrong one."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_nb.config import EnvironmentRef, RunConfig
from hermes_nb.errors import ConfigError
from hermes_nb.frameworks import registry
from hermes_nb.runs.launcher import validate_for_start
from hermes_nb.selection import discovery

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "frameworks"


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setenv(registry.FRAMEWORKS_VAR, "toy_framework.adapter:ADAPTER")


def test_the_shipped_frameworks_are_hermes_nbs_own_first_and_atroposlib() -> None:
    assert registry.names()[:2] == ["hermes_nb", "atroposlib"]


def test_a_framework_named_in_the_variable_is_registered_and_claims_its_environments(toy_registered: None) -> None:
    discovery.clear_cache()
    environments, errors = discovery.scan([FIXTURES / "envs"])

    assert errors == []
    assert [(e.name, e.framework) for e in environments] == [("toy_double", "toy")]


def test_without_its_registration_a_frameworks_environment_is_not_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(registry.FRAMEWORKS_VAR, raising=False)
    discovery.clear_cache()

    assert discovery.scan([FIXTURES / "envs"]) == ([], [])


def test_an_unknown_framework_is_refused_at_start_naming_the_registered_ones(tmp_path: Path) -> None:
    env_file = tmp_path / "env.py"
    env_file.write_text("", encoding="utf-8")
    ref = EnvironmentRef(name="x", class_name="X", file=str(env_file), framework="no_such_framework")

    with pytest.raises(ConfigError) as raised:
        validate_for_start(RunConfig(environment=ref, trainer={"backend": "local"}))

    message = str(raised.value)
    assert message.startswith("environment.framework: no framework 'no_such_framework' is registered")
    assert "hermes_nb, atroposlib" in message and registry.FRAMEWORKS_VAR in message


@pytest.mark.parametrize(
    ("entry", "says"),
    [("toy_framework.adapter", "is not module:attribute"), ("no_such_module:ADAPTER", "cannot be loaded")],
)
def test_a_wrong_registration_names_the_variable_and_the_entry(
    monkeypatch: pytest.MonkeyPatch, entry: str, says: str
) -> None:
    monkeypatch.setenv(registry.FRAMEWORKS_VAR, entry)

    with pytest.raises(ConfigError, match=f"{registry.FRAMEWORKS_VAR}: '{entry}' {says}"):
        registry.adapters()


def test_a_registration_that_is_no_adapter_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(registry.FRAMEWORKS_VAR, "os:path")

    with pytest.raises(ConfigError, match="is not a hermes_nb.frameworks.contract.FrameworkAdapter"):
        registry.adapters()
