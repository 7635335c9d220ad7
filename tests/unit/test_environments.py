"""The shipped environments: deterministic generators, disjoint train/held-out items, exact checkers, and the
scored groups and eval metrics they build from the completions a server returns."""

from __future__ import annotations

import asyncio
import importlib.util
import random
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import ValidationError

from hermes_nb.env import SampledBatch, SampledCompletion
from hermes_nb.env.splits import is_heldout
from hermes_nb.protocol.trajectory import MASK_IGNORE
from hermes_nb.system.home import shipped_environments_dir

ENV_FILES = {
    "arithmetic": "ArithmeticEnv",
    "reverse_string": "ReverseStringEnv",
    "sort_letters": "SortLettersEnv",
    "count_letters": "CountLettersEnv",
}


def load(stem: str) -> ModuleType:
    name = f"test_shipped_env_{stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, shipped_environments_dir() / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def default_config(stem: str, **fields: Any) -> Any:
    module = load(stem)
    return getattr(module, ENV_FILES[stem]).env_config_cls(**fields)


def env_of(stem: str, **fields: Any) -> Any:
    """The shipped environment at its default config plus ``fields`` (constructing it contacts no server)."""
    return getattr(load(stem), ENV_FILES[stem])(default_config(stem, **fields))


def solve(prompt: str) -> str:
    """An independent reference solver for every shipped prompt format."""
    body = prompt.removesuffix("=")
    if body.startswith("rev:"):
        return body[4:][::-1]
    if body.startswith("sort:"):
        return "".join(sorted(body[5:]))
    if body.startswith("count:"):
        _, letter, text = body.split(":")
        return str(text.count(letter))
    left, op, right = body.partition("+") if "+" in body else body.partition("-")
    return str(int(left) + int(right) if op == "+" else int(left) - int(right))


@pytest.mark.parametrize("stem", ENV_FILES)
def test_every_shipped_file_defines_its_environment_with_a_docstring(stem: str) -> None:
    module = load(stem)
    env_cls = getattr(module, ENV_FILES[stem])
    assert env_cls.name == stem
    assert module.__doc__ and all(word in module.__doc__ for word in ("Task:", "Reward:", "Eval:"))


@pytest.mark.parametrize("stem", ENV_FILES)
def test_training_items_are_the_same_for_the_same_seed_and_differ_across_seeds(stem: str) -> None:
    def first_prompts(seed: int) -> list[str]:
        env = env_of(stem, seed=seed)
        return [env.train_item().prompt for _ in range(50)]

    assert first_prompts(1) == first_prompts(1)
    assert first_prompts(1) != first_prompts(2)


@pytest.mark.parametrize("stem", ENV_FILES)
def test_heldout_items_are_reproducible_and_never_training_items(stem: str) -> None:
    env = env_of(stem, eval_items=100)
    heldout = env.eval_items()
    assert [item.prompt for item in heldout] == [item.prompt for item in env_of(stem, eval_items=100).eval_items()]
    assert len(heldout) == 100 and all(is_heldout(item.prompt) for item in heldout)
    train_prompts = {env.train_item().prompt for _ in range(3000)}
    assert train_prompts.isdisjoint(item.prompt for item in heldout)


@pytest.mark.parametrize("stem", ENV_FILES)
def test_generated_answers_match_an_independent_solver(stem: str) -> None:
    env = env_of(stem)
    rng = random.Random(3)
    for _ in range(300):
        item = env.generate_problem(rng)
        assert item.answer == solve(item.prompt), item


@pytest.mark.parametrize("stem", ENV_FILES)
def test_answers_fit_the_completion_budget_with_room_for_the_end_token(stem: str) -> None:
    env = env_of(stem)
    rng = random.Random(4)
    longest = max(len(env.generate_problem(rng).answer) for _ in range(2000))
    assert longest + 1 <= env.max_completion_tokens()


@pytest.mark.parametrize(
    ("text", "reward"),
    [("46", 1.0), (" 46\n", 1.0), ("\t46 ", 1.0), ("046", 0.0), ("46 apples", 0.0), ("4", 0.0), ("", 0.0)],
)
def test_the_arithmetic_checker_accepts_only_the_exact_number(text: str, reward: float) -> None:
    assert env_of("arithmetic").score_completion(text, "46") == reward


@pytest.mark.parametrize("stem", ["reverse_string", "sort_letters", "count_letters"])
def test_the_letter_checkers_are_exact_and_case_sensitive(stem: str) -> None:
    score = env_of(stem).score_completion
    assert score("abc", "abc") == 1.0
    assert score(" abc\n", "abc") == 1.0
    assert score("ABC", "abc") == 0.0
    assert score("ab", "abc") == 0.0
    assert score("abcd", "abc") == 0.0


def test_subtraction_never_has_a_negative_answer_and_mixed_has_both_operators() -> None:
    rng = random.Random(5)
    subtraction = [env_of("arithmetic", operation="sub").generate_problem(rng) for _ in range(300)]
    assert all(not item.answer.startswith("-") and "-" in item.prompt for item in subtraction)
    mixed = [env_of("arithmetic", operation="mixed").generate_problem(rng) for _ in range(100)]
    assert {"+" in item.prompt for item in mixed} == {True, False}


def test_digits_bound_the_operands() -> None:
    env = env_of("arithmetic", digits=3)
    rng = random.Random(6)
    operands = [int(x) for _ in range(500) for x in env.generate_problem(rng).prompt[:-1].split("+")]
    assert max(operands) <= 999 and max(operands) >= 900


@pytest.mark.parametrize(
    ("stem", "fields"),
    [
        ("arithmetic", {"digits": 0}),
        ("arithmetic", {"digits": 7}),
        ("arithmetic", {"operation": "mul"}),
        ("reverse_string", {"min_length": 6, "max_length": 5}),
        ("sort_letters", {"alphabet_size": 27}),
        ("count_letters", {"min_length": 0}),
    ],
)
def test_invalid_task_settings_are_refused(stem: str, fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        default_config(stem, **fields)


class FakeServer:
    """Stands in for the inference server: answers with ``reply(prompt, index)`` and records every request."""

    def __init__(self, reply: Callable[[str, int], str]) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def sample(self, prompt: str, **kwargs: Any) -> list[SampledCompletion]:
        self.requests.append({"prompt": prompt, **kwargs})
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0)  # let concurrent requests overlap, as real ones do
        self.in_flight -= 1
        texts = [self.reply(prompt, i) for i in range(kwargs["n"])]
        return [completion(prompt, text) for text in texts]

    async def sample_batch(self, prompts: list[str], **kwargs: Any) -> SampledBatch:
        self.requests.append({"prompts": prompts, **kwargs})
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0)
        self.in_flight -= 1
        return SampledBatch(
            completions=[completion(p, self.reply(p, 0)) for p in prompts], policy_version=len(self.requests)
        )


def completion(prompt: str, text: str) -> SampledCompletion:
    # Any consistent ids do: the environment must pass them through untouched.
    return SampledCompletion(
        text=text,
        prompt_token_ids=[ord(c) for c in prompt],
        token_ids=[ord(c) for c in text] + [2],
        logprobs=[-0.5] * (len(text) + 1),
        finish_reason="stop",
    )


def make_env(stem: str, server: FakeServer, **fields: Any) -> Any:
    env = env_of(stem, **fields)
    env.server = server
    return env


@pytest.mark.parametrize("stem", ENV_FILES)
def test_collect_trajectories_scores_each_completion_and_masks_the_prompt(stem: str) -> None:
    server = FakeServer(lambda prompt, i: solve(prompt) if i % 2 == 0 else "zz")
    env = make_env(stem, server, group_size=4, temperature=0.7)
    item = asyncio.run(env.get_next_item())
    group, backlog = asyncio.run(env.collect_trajectories(item))

    assert backlog == [] and group is not None
    assert group.scores == [1.0, 0.0, 1.0, 0.0]
    assert group.verdicts() == [True, False, True, False]
    prompt_len = len(item.prompt)
    for i, (tokens, masks) in enumerate(zip(group.tokens, group.masks, strict=True)):
        assert tokens[:prompt_len] == [ord(c) for c in item.prompt]
        assert masks[:prompt_len] == [MASK_IGNORE] * prompt_len
        assert masks[prompt_len:] == tokens[prompt_len:] == [ord(c) for c in server.reply(item.prompt, i)] + [2]
    # the decoded text recorded with the trained batch, for the rollout viewer
    assert group.messages is not None
    assert [[m.model_dump() for m in conversation] for conversation in group.messages] == [
        [{"role": "user", "content": item.prompt}, {"role": "assistant", "content": server.reply(item.prompt, i)}]
        for i in range(4)
    ]
    [request] = server.requests
    assert request["n"] == 4 and request["temperature"] == 0.7 and "\n" in request["stop"]


def test_a_group_with_equal_scores_is_dropped_only_when_asked() -> None:
    server = FakeServer(lambda prompt, i: solve(prompt))
    dropping = make_env("arithmetic", server, group_size=3)
    keeping = make_env("arithmetic", server, group_size=3, ensure_scores_are_not_same=False)
    item = asyncio.run(dropping.get_next_item())

    assert asyncio.run(dropping.collect_trajectories(item))[0] is None
    kept = asyncio.run(keeping.collect_trajectories(item))[0]
    assert kept is not None and kept.scores == [1.0, 1.0, 1.0]


def test_a_dropped_group_is_still_counted_as_sampled_once() -> None:
    server = FakeServer(lambda prompt, i: solve(prompt))
    env = make_env("arithmetic", server, group_size=3)
    asyncio.run(env.collect_trajectories(asyncio.run(env.get_next_item())))

    assert env.take_dropped() == ([1.0, 1.0, 1.0], [True, True, True])
    assert env.take_dropped() == ([], [])


def test_training_items_come_from_the_configured_seed_and_never_from_the_heldout_split() -> None:
    server = FakeServer(lambda prompt, i: "")
    first = make_env("arithmetic", server, seed=9)
    second = make_env("arithmetic", server, seed=9)
    items = [asyncio.run(first.get_next_item()) for _ in range(200)]
    assert items == [asyncio.run(second.get_next_item()) for _ in range(200)]
    assert not any(is_heldout(item.prompt) for item in items)


@pytest.mark.parametrize("stem", ENV_FILES)
def test_evaluate_reports_greedy_accuracy_over_the_heldout_items(stem: str, monkeypatch: pytest.MonkeyPatch) -> None:
    heldout = env_of(stem, eval_items=40).eval_items()
    wrong = {item.prompt for item in heldout[:10]}
    server = FakeServer(lambda prompt, i: "zz" if prompt in wrong else solve(prompt))
    env = make_env(stem, server, eval_items=40, max_eval_workers=3)
    monkeypatch.setattr(type(env), "eval_chunk_size", 8)

    metrics = asyncio.run(env.evaluate())

    # Small problem spaces repeat held-out items; every repeat of a "wrong" prompt is wrong again.
    expected = sum(item.prompt not in wrong for item in heldout) / 40
    assert expected <= 30 / 40
    # Five requests of 8 prompts; the newest policy version any of them saw names the weights measured.
    assert metrics == {"eval/percent_correct": pytest.approx(expected), "eval/policy_step": 5.0}
    assert [p for r in server.requests for p in r["prompts"]] == [item.prompt for item in heldout]
    assert [len(r["prompts"]) for r in server.requests] == [8] * 5
    assert all(r["temperature"] == 0.0 for r in server.requests)
    assert 1 < server.most_in_flight <= 3


def test_the_shipped_loader_finds_exactly_one_environment_per_file() -> None:
    from hermes_nb.env_host.loading import load_env_class

    for stem, class_name in ENV_FILES.items():
        assert load_env_class(str(Path(shipped_environments_dir()) / f"{stem}.py")).__name__ == class_name
