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

from hermes_nb.home import embedded_base_model_dir

# Everything the shipped tokenizer is made of (the chat template may live in its own file).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def make_tiny_model(
    directory: str | Path,
    *,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 2,
    intermediate_size: int = 64,
    seed: int = 0,
) -> Path:
    """Write a random-init Llama causal LM (~30k parameters by default) and the shipped tokenizer to ``directory``.

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
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
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
