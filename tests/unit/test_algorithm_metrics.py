"""Status and results show what people compare RL algorithms by (reward std, KL, entropy, clip fractions,
completion length, truncated fraction, groups dropped, learning rate): typed fields, each the newest value the
trainer logged, and absent (None, not shown) where a run has not logged it."""

from __future__ import annotations

import asyncio

from run_dirs import FINISHED_ID, T0, write_finished_run, write_rows

from hermes_nb import api
from hermes_nb.protocol import metrics as keys
from hermes_nb.protocol.metrics import MetricsRow
from hermes_nb.protocol.run_files import RunPaths

LOGGED = {
    keys.TRAIN_REWARD_STD: 0.21,
    keys.TRAIN_KL: 0.0031,
    keys.TRAIN_ENTROPY: 1.25,
    keys.TRAIN_CLIP_FRACTION_LOW: 0.01,
    keys.TRAIN_CLIP_FRACTION_HIGH: 0.02,
    keys.TRAIN_COMPLETION_LENGTH: 34.5,
    keys.TRAIN_COMPLETION_LENGTH_MAX: 80.0,
    keys.TRAIN_TRUNCATED_FRACTION: 0.05,
    keys.TRAIN_GROUPS_DROPPED: 2.0,
    keys.TRAIN_LEARNING_RATE: 1e-5,
}


def finished_run_logging(values: dict[str, float]) -> RunPaths:
    """The finished 4-step run of run_dirs, whose trainer also logged ``values`` at a step 5."""
    paths = write_finished_run()
    write_rows(paths.metrics, [MetricsRow(step=5, time=T0 + 50, values={keys.TRAIN_REWARD_MEAN: 0.7, **values})])
    return paths


def test_status_has_a_typed_field_for_each_algorithm_metric_logged() -> None:
    finished_run_logging(LOGGED)

    m = asyncio.run(api.rl_check_status(FINISHED_ID)).metrics

    assert (m.reward_std, m.kl, m.entropy) == (0.21, 0.0031, 1.25)
    assert (m.clip_fraction_low, m.clip_fraction_high) == (0.01, 0.02)
    assert (m.completion_length, m.completion_length_max, m.truncated_fraction) == (34.5, 80.0, 0.05)
    assert (m.groups_dropped, m.learning_rate) == (2.0, 1e-5)


def test_status_text_shows_them_on_one_compact_line() -> None:
    finished_run_logging(LOGGED)

    status = asyncio.run(api.rl_check_status(FINISHED_ID))

    assert (
        "  reward std 0.21, KL 0.0031, entropy 1.25, clipped low 1.0%, clipped high 2.0%, completion length 34.5, "
        "longest 80, truncated 5.0%, groups dropped 2, learning rate 1e-05"
    ) in str(status).splitlines()
    assert "<td>KL</td><td>0.0031</td>" in status._repr_html_()


def test_a_run_without_a_reference_has_no_kl_field_nor_line() -> None:
    finished_run_logging({k: v for k, v in LOGGED.items() if k != keys.TRAIN_KL})

    status = asyncio.run(api.rl_check_status(FINISHED_ID))

    assert status.metrics.kl is None
    assert status.metrics.entropy == 1.25
    assert "KL" not in str(status) and "KL" not in status._repr_html_()


def test_a_run_that_logs_none_of_them_shows_none() -> None:
    write_finished_run()  # reward, percent correct and loss only: a trainer from before these metrics

    status = asyncio.run(api.rl_check_status(FINISHED_ID))

    assert status.metrics.model_dump(include={"reward_std", "kl", "entropy", "groups_dropped"}) == dict.fromkeys(
        ("reward_std", "kl", "entropy", "groups_dropped")
    )
    assert "reward std" not in str(status) and "entropy" not in str(status)


def test_each_field_is_the_newest_value_of_its_key_even_from_an_earlier_row() -> None:
    paths = finished_run_logging({keys.TRAIN_KL: 0.002, keys.TRAIN_GROUPS_DROPPED: 3.0})
    write_rows(paths.metrics, [MetricsRow(step=6, time=T0 + 60, values={keys.TRAIN_KL: 0.004})])

    m = asyncio.run(api.rl_check_status(FINISHED_ID)).metrics

    assert (m.kl, m.groups_dropped) == (0.004, 3.0)


def test_results_carry_the_same_fields_and_a_last_logged_line() -> None:
    finished_run_logging(LOGGED)

    results = asyncio.run(api.rl_get_results(FINISHED_ID))

    assert results.algorithm.kl == 0.0031
    assert results.algorithm.truncated_fraction == 0.05
    assert any(line.startswith("  last logged: reward std 0.21, KL 0.0031") for line in str(results).splitlines())
    assert results.to_dict()["algorithm"]["entropy"] == 1.25
