"""The public API of `hermes_nb` is pinned: a change here is a deliberate change of the public surface."""

from __future__ import annotations

import hermes_nb

EXPECTED = {
    "BaseEnv",
    "BaseEnvConfig",
    "HermesNBError",
    "ScoredDataGroup",
    "__version__",
    "load_ipython_extension",
    "rl_edit_config",
    "rl_get_current_config",
    "rl_list_environments",
    "rl_load_config",
    "rl_reset_config",
    "rl_select_environment",
    "run_sync",
}


def test_all_is_pinned() -> None:
    assert set(hermes_nb.__all__) == EXPECTED


def test_every_public_name_resolves() -> None:
    for name in hermes_nb.__all__:
        assert getattr(hermes_nb, name) is not None, name
    assert set(hermes_nb.__all__) <= set(dir(hermes_nb))


def test_public_names_are_the_real_objects() -> None:
    from hermes_nb import api, env, errors, syncio

    assert hermes_nb.rl_edit_config is api.rl_edit_config
    assert hermes_nb.BaseEnv is env.BaseEnv
    assert hermes_nb.HermesNBError is errors.HermesNBError
    assert hermes_nb.run_sync is syncio.run_sync


def test_unknown_names_raise_attribute_error() -> None:
    try:
        hermes_nb.no_such_thing  # noqa: B018 - the access is the test
    except AttributeError as exc:
        assert "no_such_thing" in str(exc)
    else:
        raise AssertionError("expected AttributeError")
