"""Who is told of a selection: a listener registered with ``selection.listeners`` is told after each environment
selected (through the service, the async command, or a config file that names one), once however often it was
registered, and not inside ``muted()`` (the CLI's). The warm start's first kit is such a listener
(``hermes_nb/__init__.py``), here replaced by one that counts."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_nb.api import rl_load_config, rl_select_environment
from hermes_nb.selection import listeners, service


class Counter:
    """A test listener: counts what it was told."""

    def __init__(self) -> None:
        self.told = 0

    def __call__(self) -> None:
        self.told += 1


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter]:
    monkeypatch.setattr(listeners, "_listeners", [])
    counter = Counter()
    listeners.on_selected(counter)
    yield counter


def test_a_selection_tells_the_listeners(counter: Counter) -> None:
    service.select_environment("arithmetic")
    asyncio.run(rl_select_environment("arithmetic"))
    assert counter.told == 2


def test_a_config_file_that_names_an_environment_tells_them(counter: Counter, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("environment: arithmetic\n", encoding="utf-8")
    asyncio.run(rl_load_config(config))
    assert counter.told == 1


def test_an_edit_tells_them_nothing(counter: Counter) -> None:
    service.select_environment("arithmetic")
    service.edit_config({"group_size": 8})
    assert counter.told == 1


def test_a_listener_registered_twice_is_told_once(counter: Counter) -> None:
    listeners.on_selected(counter)
    listeners.selected()
    assert counter.told == 1


def test_inside_muted_no_listener_is_told(counter: Counter) -> None:
    with listeners.muted():
        service.select_environment("arithmetic")
    listeners.selected()
    assert counter.told == 1


def test_the_package_registers_the_warm_start_with_the_selection() -> None:
    import hermes_nb

    assert hermes_nb._warm_up in listeners._listeners


def test_with_warm_starts_off_a_selection_makes_no_kit() -> None:
    from hermes_nb.runs.supervision import warm_start

    assert not warm_start.enabled()  # the suite's setting (tests/conftest.py)
    service.select_environment("arithmetic")
    assert warm_start._maker is None and warm_start._kits == []
