"""The base model shipped in the package: loads with ``from_pretrained``, tokenizes every character losslessly,
fits the size limit, and sits at the documented partial accuracy on the quickstart task (room for RL)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hermes_nb.system.home import embedded_base_model_dir, shipped_environments_dir  # noqa: E402
from hermes_nb.testing import make_tiny_model  # noqa: E402

# docs/base_model.md: pretraining stops at partial greedy held-out accuracy on 2-digit addition.
PARTIAL_ACCURACY = (0.15, 0.45)
MAX_BYTES = 20 * 1024 * 1024
CHARACTERS = "\n" + "".join(chr(code) for code in range(32, 127))


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return transformers.AutoTokenizer.from_pretrained(embedded_base_model_dir())


@pytest.fixture(scope="module")
def model() -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(embedded_base_model_dir()).eval()


def test_the_shipped_files_fit_the_size_limit_and_use_safetensors() -> None:
    files = [p for p in embedded_base_model_dir().rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= MAX_BYTES
    assert (embedded_base_model_dir() / "model.safetensors").is_file()
    assert not any(p.suffix in {".bin", ".pt", ".pth"} for p in files)


def test_the_model_is_a_small_llama(model: Any) -> None:
    assert model.config.model_type == "llama"
    assert 0.5e6 <= sum(p.numel() for p in model.parameters()) <= 2e6


def test_every_character_round_trips_one_token_each(tokenizer: Any) -> None:
    ids = tokenizer.encode(CHARACTERS, add_special_tokens=False)
    assert len(ids) == len(CHARACTERS)
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids) == CHARACTERS


def test_plain_encoding_adds_no_special_tokens(tokenizer: Any) -> None:
    # The inference server may or may not pass add_special_tokens; the ids must be the same either way.
    assert tokenizer("12+34=")["input_ids"] == tokenizer.encode("12+34=", add_special_tokens=False)


def test_special_tokens_are_distinct_and_skipped_when_decoding(tokenizer: Any) -> None:
    specials = {tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id}
    assert len(specials) == 4
    ids = [*tokenizer.encode("46", add_special_tokens=False), tokenizer.eos_token_id, tokenizer.pad_token_id]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "46"


def test_the_chat_template_is_the_plain_prompt_for_generation(tokenizer: Any) -> None:
    messages = [{"role": "user", "content": "12+34="}]
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == "12+34="
    answered = [*messages, {"role": "assistant", "content": "46"}]
    assert tokenizer.apply_chat_template(answered, tokenize=False) == "12+34=46<eos>"


def test_generated_ids_decode_to_text(model: Any, tokenizer: Any) -> None:
    encoded = tokenizer(["12+34=", "rev:abc="], return_tensors="pt", padding=True)
    output = model.generate(**encoded, max_new_tokens=5, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    assert all(isinstance(text, str) and "<" not in text for text in texts)


def load_arithmetic() -> Any:
    spec = importlib.util.spec_from_file_location(
        "base_model_test_arithmetic", shipped_environments_dir() / "arithmetic.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_greedy_heldout_accuracy_on_addition_is_partial(model: Any, tokenizer: Any) -> None:
    arithmetic = load_arithmetic()
    env = arithmetic.ArithmeticEnv(arithmetic.ArithmeticConfig(eval_items=200))
    items = env.eval_items()
    encoded = tokenizer([item.prompt for item in items], return_tensors="pt", padding=True)
    with torch.no_grad():
        output = model.generate(
            **encoded,
            max_new_tokens=env.max_completion_tokens(),
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
    texts = tokenizer.batch_decode(output[:, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    correct = [
        env.is_correct(env.score_completion(t.split("\n")[0], i.answer)) for t, i in zip(texts, items, strict=True)
    ]
    accuracy = sum(correct) / len(correct)
    low, high = PARTIAL_ACCURACY
    assert low <= accuracy <= high
    recorded = json.loads((embedded_base_model_dir() / "pretraining.json").read_text())
    assert accuracy == pytest.approx(recorded["heldout_accuracy"]["add"], abs=0.02)


def test_make_tiny_model_is_tiny_and_shares_the_shipped_tokenizer(tmp_path: Path, tokenizer: Any) -> None:
    # What keeps it fast is its size (a wall-clock bound here would flake on a loaded machine).
    directory = make_tiny_model(tmp_path / "tiny")
    tiny = transformers.AutoModelForCausalLM.from_pretrained(directory)
    tiny_tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    assert sum(p.numel() for p in tiny.parameters()) < 100_000
    assert tiny_tokenizer.get_vocab() == tokenizer.get_vocab()
    assert tiny.config.eos_token_id == tokenizer.eos_token_id
    assert tiny_tokenizer.encode("12+34=") == tokenizer.encode("12+34=")


def test_make_tiny_model_is_reproducible_per_seed(tmp_path: Path) -> None:
    def first_weight(directory: Path) -> Any:
        return transformers.AutoModelForCausalLM.from_pretrained(directory).model.embed_tokens.weight

    same = first_weight(make_tiny_model(tmp_path / "a", seed=1)), first_weight(make_tiny_model(tmp_path / "b", seed=1))
    other = first_weight(make_tiny_model(tmp_path / "c", seed=2))
    assert torch.equal(*same)
    assert not torch.equal(same[0], other)
