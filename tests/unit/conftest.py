"""Fixtures several unit modules share: a real hermes-nb trajectory API on loopback, one per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from external_apis import api_process

from hermes_nb.trajectory_api import SyncTrajectoryClient


@pytest.fixture(scope="module")
def hermes_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with api_process("hermes", tmp_path_factory.mktemp("hermes_api") / "api.log") as (url, _):
        yield url


@pytest.fixture
def fresh_hermes_api(hermes_api: str) -> str:
    """The module's API with its queue and registrations reset, as a new one would be."""
    with SyncTrajectoryClient(hermes_api) as api:
        api.reset_data()
    return hermes_api
