"""The suite's one definition of "running in CI": a missing prerequisite fails there and skips elsewhere."""

from __future__ import annotations

import pytest
from ci import in_ci, skip_or_fail


@pytest.mark.parametrize("value", ["true", "1", "yes", "True", "gitlab"])
def test_a_set_ci_variable_means_ci(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", value)
    assert in_ci()


@pytest.mark.parametrize("value", [None, "", "0", "false", "no", " False "])
def test_an_unset_empty_or_negative_ci_means_not_ci(value: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert not in_ci()


def test_a_missing_prerequisite_fails_in_ci_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must provide this.*a tmpfs"):
        skip_or_fail("a tmpfs")


def test_a_missing_prerequisite_skips_outside_ci_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="a tmpfs"):
        skip_or_fail("a tmpfs")
