"""What "running in CI" means for the suite, defined once.

CI services set ``CI`` (GitHub Actions and GitLab set ``CI=true``; others ``1`` or ``yes``). In CI a test whose
prerequisite is missing (root, a tmpfs, a side environment, a second OS user) fails, naming what is missing, so a
runner that lost a privilege or an install step cannot hide the tests behind a skip; elsewhere it skips.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

# Values of CI that mean "not CI": unset, empty, or an explicit no.
_NOT_CI = {"", "0", "false", "no", "off"}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in _NOT_CI


def skip_or_fail(missing: str) -> NoReturn:
    """Skip the test for want of ``missing`` (a sentence naming it and how to get it); fail instead in CI."""
    if in_ci():
        pytest.fail(f"CI must provide this (a skip here would hide the test): {missing}")
    pytest.skip(missing)
