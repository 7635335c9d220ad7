"""Which base models the local backend trains: any decoder-only causal LM that ``AutoModelForCausalLM`` loads.

``check_base_model`` reads the model directory's ``config.json`` (and ``tokenizer.json``) and refuses, in one line
saying why, what cannot work: a sequence-to-sequence model, an encoder-only one (a BERT loads as
``BertLMHeadModel`` but was never trained to predict the next token), a model type ``AutoModelForCausalLM`` has no
class for (a vision model without a text head), and a tokenizer whose ids exceed the model's vocabulary (the
embedding lookup would fail mid-run). The launcher calls it before anything is created.

``lora_targets``: peft's own target modules for the architecture (its table, the ones it picks when given none),
or every linear layer when peft has none (Phi-3's fused ``qkv_proj``, OLMo 2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hermes_nb.errors import ConfigError

# Class-name endings of the causal-LM heads transformers names (GPT-2's is ``GPT2LMHeadModel``).
CAUSAL_HEADS = ("ForCausalLM", "LMHeadModel")
FIELD = "trainer.base_model"


def _read_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def vocab_size(config: dict[str, Any]) -> int | None:
    """The model's vocabulary (rows of its output embedding), from ``config.json``; a multimodal config keeps it
    in its ``text_config``."""
    size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    return int(size) if size is not None else None


def _causal_class(model_type: str) -> str | None:
    # transformers' table of AutoModelForCausalLM: model type -> class name (imported here, not at module level,
    # so this module stays light for the launcher).
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    found = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    return found if isinstance(found, str) else None


def architectures(config: dict[str, Any]) -> list[str]:
    """The model classes a ``config.json`` names (``architectures``); empty where it names none."""
    return [str(name) for name in config.get("architectures") or []]


def model_architectures(model_dir: Path) -> list[str]:
    """The model classes ``model_dir``'s ``config.json`` names."""
    return architectures(_read_json(model_dir / "config.json"))


def architecture_problem(config: dict[str, Any]) -> str | None:
    """Why ``config`` is not a decoder-only causal LM ``AutoModelForCausalLM`` loads; None when it is."""
    model_type = str(config.get("model_type", ""))
    if config.get("is_encoder_decoder"):
        return f"{model_type!r} is a sequence-to-sequence (encoder-decoder) model; only decoder-only causal LMs train"
    causal = _causal_class(model_type)
    if causal is None:
        return f"AutoModelForCausalLM has no class for model_type {model_type!r} (no text-generating head)"
    listed = architectures(config)
    if listed and causal not in listed and not any(name.endswith(CAUSAL_HEADS) for name in listed):
        return f"{', '.join(listed)} is not a causal LM (encoder-only or another head); only decoder-only LMs train"
    return None


def tokenizer_max_id(model_dir: Path) -> int | None:
    """The largest token id of the directory's ``tokenizer.json`` (vocabulary and added tokens); None without one."""
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        return None
    data = _read_json(path)
    vocab = (data.get("model") or {}).get("vocab") or {}
    ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab)))  # Unigram: [piece, score]
    ids += [int(token["id"]) for token in data.get("added_tokens") or []]
    return max(ids) if ids else None


def tokenizer_problem(model_dir: Path, config: dict[str, Any]) -> str | None:
    """Why the tokenizer cannot feed the model: an id past the last embedding row; None when it fits."""
    rows, highest = vocab_size(config), tokenizer_max_id(model_dir)
    if rows is None or highest is None or highest < rows:
        return None
    return f"the tokenizer's ids reach {highest} but the model's vocabulary has {rows} rows (vocab_size)"


def check_base_model(model_dir: Path, base_model: str) -> None:
    """Refuse a base model the local backend cannot train, naming the field and the reason (see the module doc)."""
    config = _read_json(model_dir / "config.json")
    problem = architecture_problem(config) or tokenizer_problem(model_dir, config)
    if problem is not None:
        raise ConfigError(f"{FIELD}: {base_model!r} cannot be trained here: {problem}")


def peft_targets(model_type: str) -> list[str] | None:
    """peft's LoRA target modules for ``model_type`` (the ones it picks when given none); None where its table has
    none, or without peft."""
    try:
        from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    except ImportError:
        return None
    targets = TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(model_type)
    return list(targets) if targets else None


def lora_targets(model: Any) -> list[str] | str:
    """The modules LoRA adapts in ``model``: peft's targets for its model type, or ``"all-linear"``."""
    return peft_targets(getattr(model.config, "model_type", "")) or "all-linear"
