"""The shipped ``reasoning_gym`` environment on the real reasoning-gym package: items reproducible by seed,
held-out items never trained on, a mix that follows its weights, reasoning-gym's own scores of the extracted
answer, and bad config refused naming the field."""

from __future__ import annotations

import asyncio
import collections
import importlib.util
import sys
from types import ModuleType
from typing import Any

import pytest
from pydantic import ValidationError

from hermes_nb.env import SampledBatch, SampledCompletion
from hermes_nb.env.splits import is_heldout
from hermes_nb.system.home import shipped_environments_dir

pytest.importorskip("reasoning_gym", reason="needs the environments extra: pip install -e '.[environments]'")

# Two arithmetic datasets with one-digit operands: short answers, and a small space of distinct prompts.
MIX = {"chain_sum": 3.0, "products": 1.0}
SMALL = {"chain_sum": {"max_terms": 2, "max_digits": 1}, "products": {"max_terms": 2, "max_digits": 1}}


def module() -> ModuleType:
    name = "test_shipped_env_reasoning_gym_tasks"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, shipped_environments_dir() / "reasoning_gym_tasks.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def config(**fields: Any) -> Any:
    return module().ReasoningGymConfig(**{"datasets": MIX, "dataset_params": SMALL, **fields})


def env(**fields: Any) -> Any:
    return module().ReasoningGymEnv(config(**fields))


def completion(text: str) -> SampledCompletion:
    return SampledCompletion(
        text=text, prompt_token_ids=[1], token_ids=[2, 3], logprobs=[-0.1, -0.2], finish_reason="stop"
    )


class ScriptedServer:
    """Samples a group as the right answer (``answer_of``), that answer with a digit more, and nothing, in turn;
    evaluates with the right answer."""

    def __init__(self, answer_of: Any) -> None:
        self.answer_of = answer_of

    async def sample(self, prompt: str, n: int, **_: Any) -> list[SampledCompletion]:
        right = self.answer_of(prompt)
        return [completion([right, f"{right}0", ""][k % 3]) for k in range(n)]

    async def sample_batch(self, prompts: list[str], **_: Any) -> SampledBatch:
        return SampledBatch(completions=[completion(self.answer_of(p)) for p in prompts], policy_version=3)


def test_items_are_the_same_for_the_same_seed_and_differ_for_another() -> None:
    first, again, other = _train(env(seed=7), 30), _train(env(seed=7), 30), _train(env(seed=8), 30)
    assert first == again
    assert [i.prompt for i in first] != [i.prompt for i in other]
    assert env(seed=7).eval_items() == env(seed=7).eval_items()


def _train(environment: Any, count: int) -> list[Any]:
    return [environment.train_item() for _ in range(count)]


def test_training_items_never_include_a_held_out_prompt() -> None:
    environment = env(eval_items=50)
    train = {item.prompt for item in _train(environment, 300)}
    heldout = {item.prompt for item in environment.eval_items()}
    assert heldout and train and not train & heldout
    assert all(is_heldout(p) for p in heldout) and not any(is_heldout(p) for p in train)


def test_held_out_items_are_generated_once_per_environment() -> None:
    environment = env(eval_items=30)
    first = environment.eval_items()
    generated = type(environment).entry.cache_info().misses
    assert environment.eval_items() == first
    assert type(environment).entry.cache_info().misses == generated


def test_the_mix_follows_its_weights() -> None:
    counts = collections.Counter(item.metadata["dataset"] for item in _train(env(), 2000))
    share = counts["chain_sum"] / sum(counts.values())
    assert set(counts) == set(MIX)
    assert 0.70 <= share <= 0.80  # weight 3 of 4: ±0.05 is five standard deviations of 2000 draws


def test_each_dataset_gets_its_own_parameters() -> None:
    items = _train(env(), 200)
    products = [i for i in items if i.metadata["dataset"] == "products"]
    # max_digits 1: one-digit factors, so no product is above 81.
    assert products and all(int(i.answer) <= 81 for i in products)


def test_the_right_answer_scores_1_and_a_wrong_or_missing_one_less() -> None:
    environment = env()
    item = environment.train_item()
    assert environment.score_item(f" {item.answer}", item) == 1.0
    assert environment.score_item(f"{int(item.answer) + 1}", item) < 1.0
    assert environment.score_item("", item) == 0.0
    # The answer with more around it: reasoning-gym's partial credit, which is not correct.
    partial = environment.score_item(f"{item.answer}0", item)
    assert partial < 1.0 and not environment.is_correct(partial)


@pytest.mark.parametrize(
    ("rule", "text", "extracted"),
    [
        ("last_line", "  42 ", "42"),
        ("last_line", "working: 40+2\n42", "42"),
        ("last_line", "\n", None),
        ("answer_prefix", "so. Answer: 42", "42"),
        ("answer_prefix", "42", None),
        ("answer_tag", "<think>hm</think><answer> 42 </answer>", "42"),
        ("answer_tag", "<answer>1</answer> then <answer>42</answer>", "42"),
        ("answer_tag", "42", None),
    ],
)
def test_extraction_rules(rule: str, text: str, extracted: str | None) -> None:
    assert module().extract_answer(text, rule) == extracted


def test_the_answer_is_extracted_before_it_is_scored() -> None:
    environment = env(extraction="answer_tag", prompt_template="{question} Reply as <answer>...</answer>:")
    item = environment.train_item()
    assert environment.score_item(f"<answer>{item.answer}</answer>", item) == 1.0
    assert environment.score_item(item.answer, item) == 0.0  # no tag: no answer


def test_groups_and_the_evaluation_carry_reasoning_gyms_scores() -> None:
    environment = env(group_size=3, eval_items=20)
    answers = {i.prompt: i.answer for i in [*_train(env(), 1), *environment.eval_items()]}
    environment.server = ScriptedServer(lambda prompt: answers[prompt])
    group, _ = asyncio.run(environment.collect_trajectories(env().train_item()))
    right, partial, empty = group.scores
    assert (right, empty) == (1.0, 0.0) and 0.0 < partial < 1.0  # reasoning-gym's partial credit
    assert group.verdicts() == [True, False, False]
    metrics = asyncio.run(environment.evaluate())
    assert metrics["eval/percent_correct"] == 1.0


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"datasets": {"no_such_dataset": 1.0}}, "no_such_dataset"),
        ({"datasets": {}}, "datasets"),
        ({"datasets": {"chain_sum": 0.0}}, "datasets"),
        ({"datasets": {"chain_sum": 1.0}, "dataset_params": {"products": {}}}, "dataset_params.products"),
        ({"dataset_params": {"chain_sum": {"seed": 3}}}, "dataset_params.chain_sum"),
        ({"dataset_params": {"chain_sum": {"max_terms": 0}}}, "dataset_params.chain_sum"),
        ({"dataset_params": {"chain_sum": {"no_such_param": 1}}}, "dataset_params.chain_sum"),
        ({"prompt_template": "no question here"}, "prompt_template"),
        ({"prompt_template": "{question} {other}"}, "prompt_template"),
        ({"extraction": "first_word"}, "extraction"),
        ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ],
)
def test_bad_config_is_refused_naming_the_field(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(ValidationError) as refused:
        config(**fields)
    assert named in str(refused.value)


def test_an_unknown_dataset_is_refused_with_some_valid_names() -> None:
    with pytest.raises(ValidationError) as refused:
        config(datasets={"chainsum": 1.0})
    message = str(refused.value)
    assert "unknown dataset 'chainsum' (did you mean chain_sum" in message
    assert "105 are known, e.g. chain_sum, decimal_chain_sum, ab, acre" in message


def test_without_the_package_the_error_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes the import fail as an absent package does.
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    for made in (module().ReasoningGymConfig, config):  # the defaults, and named datasets
        with pytest.raises(ImportError, match=r"pip install 'hermes-nb\[environments\]'"):
            made()
