"""Small random-weight models of the architectures users train, each over the shipped base model's tokenizer.

Each is ``AutoModelForCausalLM.from_config`` of its transformers config at a few thousand parameters, with a
vocabulary padded past the tokenizer's 100 ids (as real checkpoints pad theirs), tied or untied embeddings as the
family ships them, and short sliding windows where the family has them, so a 12-token sequence crosses one.
SmolLM is a Llama config (``LlamaForCausalLM``, tied embeddings, SmolLM's head layout scaled down).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from hermes_nb.system.home import embedded_base_model_dir
from hermes_nb.testing import TOKENIZER_FILES

# Rows of the output embedding: past the tokenizer's 100 ids, as real models pad theirs.
VOCAB = 128
WINDOW = 8  # a sliding window shorter than the test sequences, so the window matters

COMMON: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

# Architecture -> (transformers config class, what differs from COMMON).
ARCHITECTURES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", {"tie_word_embeddings": False}),
    "qwen2": ("Qwen2Config", {"tie_word_embeddings": False}),
    "qwen3": ("Qwen3Config", {"tie_word_embeddings": True, "head_dim": 8}),
    "gemma3": (
        "Gemma3TextConfig",
        {"head_dim": 8, "sliding_window": WINDOW, "query_pre_attn_scalar": 8, "final_logit_softcapping": 30.0},
    ),
    "mistral": ("MistralConfig", {"tie_word_embeddings": False, "sliding_window": WINDOW}),
    "phi3": ("Phi3Config", {"tie_word_embeddings": False}),
    "olmo2": ("Olmo2Config", {"tie_word_embeddings": False}),
    "smollm": ("LlamaConfig", {"tie_word_embeddings": True, "num_key_value_heads": 1}),
}


def make_model(directory: Path, architecture: str, *, seed: int = 0, **overrides: Any) -> Path:
    """Write a random-init ``architecture`` model (``ARCHITECTURES``) and the shipped tokenizer to ``directory``."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    class_name, extra = ARCHITECTURES[architecture]
    config = getattr(transformers, class_name)(**{**COMMON, **extra, **overrides})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    source = embedded_base_model_dir()
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, directory / name)
    return directory
