"""Helpers for tests: a random-init model far smaller than the shipped one, with the shipped tokenizer.

``make_tiny_model(tmp_path)`` writes a directory that ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` load, in a fraction of a second, so tests of the trainer, the inference server
and checkpoints need neither the shipped weights' accuracy nor their size. Needs the ``train`` extra (torch,
transformers).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from hermes_nb.system.home import embedded_base_model_dir, embedded_chat_model_dir

# Everything the shipped tokenizer is made of (the chat template may live in its own file).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")
# The shipped chat model's generation settings (eos = <|im_end|>) travel with its tokenizer.
CHAT_MODEL_FILES = (*TOKENIZER_FILES, "generation_config.json")


class ModelShape(BaseModel):
    """The sizes of a Llama model. The default trains in a fraction of a second (~30k parameters) and keeps
    grouped-query attention (4 query heads share 2 key/value heads), so tests exercise that path too."""

    model_config = ConfigDict(frozen=True)

    hidden_size: int = 32
    intermediate_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2


def shipped_shape() -> ModelShape:
    """The shape of the shipped base model, read from its config (for tests that need a same-shaped model)."""
    shipped = json.loads((embedded_base_model_dir() / "config.json").read_text(encoding="utf-8"))
    return ModelShape(**{name: shipped[name] for name in ModelShape.model_fields})


def make_tiny_model(directory: str | Path, shape: ModelShape | None = None, *, seed: int = 0) -> Path:
    """Write a random-init Llama causal LM of ``shape`` and the shipped tokenizer to ``directory``.

    Same vocabulary, special-token ids and chat template as the shipped base model, so token ids are
    interchangeable between the two. Returns the directory.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    source = embedded_base_model_dir()
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    shipped = json.loads((source / "config.json").read_text(encoding="utf-8"))
    config = LlamaConfig(
        vocab_size=shipped["vocab_size"],
        max_position_embeddings=shipped["max_position_embeddings"],
        tie_word_embeddings=True,
        pad_token_id=shipped["pad_token_id"],
        bos_token_id=shipped["bos_token_id"],
        eos_token_id=shipped["eos_token_id"],
        **(shape or ModelShape()).model_dump(),
    )
    # A private generator: seeding the global one would change the randomness of the test that calls this.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = shipped["pad_token_id"]
    model.generation_config.eos_token_id = shipped["eos_token_id"]
    model.save_pretrained(target)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)
    return target


def make_tiny_chat_model(directory: str | Path, shape: ModelShape | None = None, *, seed: int = 0) -> Path:
    """Write a random-init Qwen3 causal LM of ``shape`` with the shipped chat model's tokenizer, chat template and
    generation config to ``directory``; returns it.

    Token ids, special tokens and the template are the shipped chat model's, so conversations render and encode
    identically; only the weights differ (random, ~37k parameters at the default shape).
    """
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    source = embedded_chat_model_dir()
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    shipped = json.loads((source / "config.json").read_text(encoding="utf-8"))
    sizes = (shape or ModelShape()).model_dump()
    config = Qwen3Config(
        vocab_size=shipped["vocab_size"],
        max_position_embeddings=shipped["max_position_embeddings"],
        tie_word_embeddings=True,
        pad_token_id=shipped["pad_token_id"],
        bos_token_id=None,
        eos_token_id=shipped["eos_token_id"],
        # Qwen3's head size is its own setting (default 128); derived here, as in Llama.
        head_dim=sizes["hidden_size"] // sizes["num_attention_heads"],
        **sizes,
    )
    # A private generator: seeding the global one would change the randomness of the test that calls this.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.save_pretrained(target)
    for name in CHAT_MODEL_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)
    return target
