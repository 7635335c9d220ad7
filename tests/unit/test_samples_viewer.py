"""The rollout viewer: ``rl_get_samples`` over a run's recorded trajectories, its text and HTML forms (tool calls
and results drawn), ``%rl_samples`` in a real IPython shell, and the samples widget driven headless."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from rollout_runs import TOOL_RUN, write_tool_run
from run_dirs import write_state

import hermes_nb.tools
from hermes_nb.errors import HermesNBError
from hermes_nb.notebook import kernel_runs
from hermes_nb.notebook.widgets.samples import SamplesViewer
from hermes_nb.rollouts.commands import rl_get_samples
from hermes_nb.rollouts.samples import SampleView
from hermes_nb.syncio import run_sync
from hermes_nb.trainer.step.advantages import normalized_scores


def samples(**options: Any) -> SampleView:
    return run_sync(rl_get_samples(**options))


@pytest.fixture
def tool_run() -> str:
    write_tool_run()
    return TOOL_RUN


def test_the_last_recorded_step_of_the_newest_run_is_the_default(tool_run: str) -> None:
    view = samples()
    assert (view.run_id, view.step, view.steps, view.total) == (tool_run, 2, [1, 2], 4)
    assert [(s.group, s.member, s.score, s.correct) for s in view.samples] == [
        (0, 0, 1.0, True),
        (0, 1, 0.0, False),
        (1, 0, 1.0, True),
        (1, 1, 0.0, False),
    ]


def test_advantages_are_the_trainers_group_normalised_scores(tool_run: str) -> None:
    view = samples(run_id=tool_run, step=1)
    expected = normalized_scores([1.0, 0.0, 0.5])
    assert [s.advantage for s in view.samples] == pytest.approx(expected)
    assert view.samples[0].completion_tokens == 2 and view.samples[0].prompt_tokens == 2


def test_worst_and_best_order_by_score_and_n_limits(tool_run: str) -> None:
    worst = samples(step=1, order="worst", n=2)
    assert [s.score for s in worst.samples] == [0.0, 0.5]
    assert worst.total == 3
    best = samples(step=1, order="best")
    assert [s.score for s in best.samples] == [1.0, 0.5, 0.0]


def test_a_score_range_keeps_only_the_samples_inside_it(tool_run: str) -> None:
    view = samples(step=1, min_score=0.25, max_score=1.0)
    assert [s.score for s in view.samples] == [1.0, 0.5]
    assert view.score_range == (0.0, 1.0)  # the step's own range, for the widget's slider


def test_single_turn_samples_show_prompt_and_completion(tool_run: str) -> None:
    view = samples(step=1)
    assert view.samples[1].messages == [
        {"role": "user", "content": "2+2="},
        {"role": "assistant", "content": "5"},
    ]
    text = str(view)
    assert "[user] 2+2=" in text and "[assistant] 5" in text
    assert "score 0 (wrong), advantage -1.2" in text


def test_tool_calls_and_results_are_rendered_as_such(tool_run: str) -> None:
    view = samples(step=2, n=1)
    text = str(view)
    assert '[tool call] get_weather {"city": "Paris"}' in text
    assert '[tool (call_1)] {"temp_c": 18}' in text
    assert "[assistant] It is 18 C in Paris." in text
    page = view._repr_html_()
    assert "class='hermes-nb-tool-call'" in page and "get_weather(" in page
    assert "class='hermes-nb-tool-result'" in page and "{&quot;temp_c&quot;: 18}" in page


def test_html_escapes_what_the_model_wrote(tmp_path: Any) -> None:
    from rollout_runs import qa_group

    from hermes_nb.trainer.run.checkpoints import record_batch

    paths = write_state(TOOL_RUN, "completed", total_steps=1)
    record_batch(paths.run_dir, 1, [qa_group("<b>hi</b>", ["<script>x</script>", "ok"], [0.0, 1.0])])
    page = samples()._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page


def test_a_group_without_messages_shows_its_token_counts(tool_run: str) -> None:
    from rollout_runs import agent_group

    from hermes_nb.trainer.run.checkpoints import record_batch

    record_batch(write_state(TOOL_RUN).run_dir, 3, [agent_group().model_copy(update={"messages": None})])
    view = samples(step=3, n=1)
    assert view.samples[0].messages is None
    assert "no text recorded: 3 prompt and 2 completion tokens" in str(view)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"step": 7}, "step: run 20260102-000000-toolcallsx recorded steps 1 to 2, not 7"),
        ({"n": 0}, "n: 0 samples asked for"),
        ({"order": "random"}, "order: 'random' is not an order"),
        ({"min_score": 1.0, "max_score": 0.0}, "min_score: 1.0 is above max_score 0.0"),
        ({"run_id": "nope"}, "unknown run 'nope'"),
    ],
)
def test_bad_requests_name_what_is_accepted(tool_run: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises(HermesNBError, match=message.replace("(", r"\(").replace(")", r"\)")):
        samples(**options)


def test_a_run_that_recorded_nothing_yet_says_so() -> None:
    write_state(TOOL_RUN, "running")
    with pytest.raises(HermesNBError, match="has recorded no samples yet"):
        samples()


def test_the_agent_tool_answers_json(tool_run: str) -> None:
    answer = json.loads(run_sync(hermes_nb.tools.rl_get_samples(tool_run, 1, "worst", 1)))
    assert answer["step"] == 1 and answer["samples"][0]["score"] == 0.0
    assert "error" in json.loads(run_sync(hermes_nb.tools.rl_get_samples(tool_run, 9)))


# ---------------------------------------------------------------- %rl_samples


@pytest.fixture(scope="module")
def shell() -> InteractiveShell:
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "hermes_nb")
    return ip


@pytest.fixture
def ip(shell: InteractiveShell) -> Iterator[InteractiveShell]:
    kernel_runs.forget_started()
    yield shell
    kernel_runs.forget_started()


def test_rl_samples_shows_what_rl_get_samples_shows(ip: InteractiveShell, tool_run: str) -> None:
    assert ip.run_line_magic("rl_samples", "") == samples()
    assert ip.run_line_magic("rl_samples", f"{tool_run} --step 1 --worst -n 2") == samples(step=1, order="worst", n=2)
    assert ip.run_line_magic("rl_samples", "--best --min-score 0.5 --step 1") == samples(
        step=1, order="best", min_score=0.5
    )


def test_rl_samples_refuses_worst_and_best_together(ip: InteractiveShell, tool_run: str) -> None:
    with pytest.raises(UsageError, match="--worst or --best, not both"):
        ip.run_line_magic("rl_samples", "--worst --best")


def test_rl_samples_user_errors_are_one_line(ip: InteractiveShell, tool_run: str) -> None:
    with pytest.raises(UsageError, match="recorded steps 1 to 2, not 5"):
        ip.run_line_magic("rl_samples", "--step 5")


# ---------------------------------------------------------------- the widget


def test_the_widget_shows_the_last_step_and_its_score_range(tool_run: str) -> None:
    viewer = SamplesViewer()
    assert viewer.step.options == (1, 2) and viewer.step.value == 2
    assert viewer.scores.value == (0.0, 1.0)
    assert "get_weather(" in viewer.view.value and "hermes-nb-tool-result" in viewer.view.value


def test_choosing_a_step_order_count_and_score_range_requeries(tool_run: str) -> None:
    viewer = SamplesViewer(tool_run)
    viewer.step.value = 1
    assert viewer.shown is not None and viewer.shown.step == 1
    assert "2+2=" in viewer.view.value and "get_weather" not in viewer.view.value
    viewer.order.value = "worst"
    viewer.count.value = 1
    assert viewer.shown == samples(step=1, order="worst", n=1)
    viewer.order.value = "best"
    viewer.count.value = 8
    viewer.scores.value = (0.4, 0.6)
    assert [s.score for s in viewer.shown.samples] == [0.5]


def test_the_widget_shows_a_user_error_in_place() -> None:
    write_state(TOOL_RUN, "running")
    viewer = SamplesViewer(TOOL_RUN)
    assert "has recorded no samples yet" in viewer.view.value
    assert viewer.shown is None


def test_without_messages_the_runs_tokenizer_decodes_prompt_and_completion(tool_run: str) -> None:
    from transformers import AutoTokenizer

    from hermes_nb.config import RunConfig
    from hermes_nb.protocol.trajectory import MASK_IGNORE, ScoredDataGroup
    from hermes_nb.system.home import embedded_base_model_dir
    from hermes_nb.trainer.run.checkpoints import record_batch

    paths = write_state(TOOL_RUN)
    RunConfig().save(paths.config)  # trainer.base_model: the shipped model, whose tokenizer decodes
    tokenizer = AutoTokenizer.from_pretrained(str(embedded_base_model_dir()))
    prompt, answer = (
        tokenizer.encode("7*6=", add_special_tokens=False),
        tokenizer.encode("42", add_special_tokens=False),
    )
    group = ScoredDataGroup(
        tokens=[prompt + answer], masks=[[MASK_IGNORE] * len(prompt) + answer], scores=[1.0]
    )  # as an atroposlib environment may send it: no messages
    record_batch(paths.run_dir, 3, [group])
    [sample] = samples(step=3).samples
    assert sample.decoded
    assert sample.messages == [{"role": "user", "content": "7*6="}, {"role": "assistant", "content": "42"}]
    assert "(text decoded from token ids)" in str(samples(step=3))
