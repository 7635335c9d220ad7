"""How many warm kits a kernel holds is read from ``HERMES_NB_WARM_KITS`` (2 unless set); a value it cannot hold is
refused by the start's checks (before its run is made), naming the variable, and ignored where warm starts are off."""

from __future__ import annotations

import pytest

from hermes_nb.config import EnvironmentRef, RunConfig
from hermes_nb.errors import ConfigError
from hermes_nb.runs.launcher import validate_for_start
from hermes_nb.runs.supervision import warm_start
from hermes_nb.system import home

ENVIRONMENT = EnvironmentRef(
    name="arithmetic", class_name="ArithmeticEnv", file=str(home.shipped_environments_dir() / "arithmetic.py")
)


def test_a_kernel_holds_two_kits_unless_told_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(warm_start.KITS_VAR, raising=False)
    assert warm_start.kits_held() == 2
    monkeypatch.setenv(warm_start.KITS_VAR, " 1 ")
    assert warm_start.kits_held() == 1


@pytest.mark.parametrize("value", ["0", "3", "two", ""])
def test_a_count_it_cannot_hold_names_the_variable_and_what_it_accepts(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(warm_start.KITS_VAR, value)
    with pytest.raises(ConfigError, match=r"HERMES_NB_WARM_KITS=.*expected 1 or 2"):
        warm_start.kits_held()


def test_the_start_checks_refuse_it_and_ignore_it_with_warm_starts_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(warm_start.KITS_VAR, "5")
    monkeypatch.setenv(warm_start.WARM_START_VAR, "1")
    with pytest.raises(ConfigError, match="HERMES_NB_WARM_KITS"):
        validate_for_start(RunConfig(environment=ENVIRONMENT))
    monkeypatch.setenv(warm_start.WARM_START_VAR, "0")
    validate_for_start(RunConfig(environment=ENVIRONMENT))
