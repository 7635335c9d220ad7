"""A tiny random Llama model with a character-level tokenizer, saved to a directory, for trainer and
inference tests (the shipped base model may not exist yet, and tests must not depend on it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"]
CHARACTERS = ["\n", *(chr(code) for code in range(32, 127))]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
)
# Small enough that a test trains in a fraction of a second; the shipped model is 128 wide x 4 layers.
TEST_SHAPE = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
SHIPPED_SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
}


def build_tokenizer() -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate([*SPECIAL_TOKENS, *CHARACTERS])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        chat_template=CHAT_TEMPLATE,
        model_max_length=128,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )


def make_tiny_model(out: Path, shape: dict[str, int] | None = None, seed: int = 0) -> Path:
    """Save a random Llama + tokenizer to ``out``, loadable with ``from_pretrained``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **(shape or TEST_SHAPE),
    )
    model = LlamaForCausalLM(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out
