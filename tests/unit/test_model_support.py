"""A base model the local backend cannot train is refused before launch, in one line saying why: an encoder-only
model, a sequence-to-sequence one, a vision model without a text head, a tokenizer whose ids exceed the model's
vocabulary. Causal LMs of every family pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from architectures import ARCHITECTURES, make_model

from hermes_nb.config import EnvironmentRef, RunConfig, TrainerConfig
from hermes_nb.errors import ConfigError
from hermes_nb.runs.launcher import validate_for_start
from hermes_nb.system.home import embedded_base_model_dir, shipped_environments_dir
from hermes_nb.trainer.local.model_support import check_base_model, tokenizer_max_id

SMALL = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}


def _saved(directory: Path, class_name: str, model_class: str, **sizes: int) -> Path:
    import transformers

    config = getattr(transformers, class_name)(**sizes)
    getattr(transformers, model_class)(config).save_pretrained(directory)
    return directory


def _refusal(model_dir: Path) -> str:
    with pytest.raises(ConfigError) as refused:
        check_base_model(model_dir, str(model_dir))
    message = str(refused.value)
    assert message.startswith("trainer.base_model: ") and "\n" not in message
    return message


@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
def test_every_causal_family_passes(architecture: str, tmp_path: Path) -> None:
    check_base_model(make_model(tmp_path / architecture, architecture), architecture)


def test_the_shipped_models_pass() -> None:
    check_base_model(embedded_base_model_dir(), "embedded")


def test_an_encoder_only_model_is_refused(tmp_path: Path) -> None:
    model_dir = _saved(tmp_path, "BertConfig", "BertForMaskedLM", vocab_size=128, **SMALL)
    assert "BertForMaskedLM is not a causal LM" in _refusal(model_dir)


def test_a_sequence_to_sequence_model_is_refused(tmp_path: Path) -> None:
    model_dir = _saved(tmp_path, "T5Config", "T5ForConditionalGeneration", vocab_size=128, d_model=32, d_ff=64)
    assert "sequence-to-sequence" in _refusal(model_dir)


def test_a_vision_model_without_a_text_head_is_refused(tmp_path: Path) -> None:
    model_dir = _saved(tmp_path, "ViTConfig", "ViTModel", image_size=8, patch_size=4, **SMALL)
    assert "no class for model_type 'vit'" in _refusal(model_dir)


def test_a_tokenizer_past_the_vocabulary_is_refused(tmp_path: Path) -> None:
    model_dir = make_model(tmp_path / "small_vocab", "llama", vocab_size=64)
    highest = tokenizer_max_id(model_dir)
    assert highest is not None and highest >= 64
    assert f"ids reach {highest} but the model's vocabulary has 64 rows" in _refusal(model_dir)


def test_the_launcher_refuses_such_a_model_before_a_run_starts(tmp_path: Path) -> None:
    model_dir = _saved(tmp_path, "T5Config", "T5ForConditionalGeneration", vocab_size=128, d_model=32, d_ff=64)
    environment = EnvironmentRef(
        name="arithmetic", class_name="ArithmeticEnv", file=str(shipped_environments_dir() / "arithmetic.py")
    )
    config = RunConfig(environment=environment, trainer=TrainerConfig(base_model=str(model_dir)))
    with pytest.raises(ConfigError, match=r"trainer.base_model: .* sequence-to-sequence"):
        validate_for_start(config)
